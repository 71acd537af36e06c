//! `moe_bench`: expert-parallel MoE dispatch and combine (`rshmem::ep`) on every PE: µs per
//! dispatch and per combine, GB/s of NVLink traffic, tokens/s, at several token counts.
//!
//! Routing: every token picks `k` distinct experts uniformly at random out of `E` (seeded),
//! weights uniform in (0, 1); tokens random bf16 (or fp32, or fp8 e4m3 with one f32 scale per
//! 128 elements: `--dtype fp8`). The stand-in expert is the identity, written in place for bf16
//! and fp32 (the combine reads the dispatch output), so the combine output of every token is
//! `Σ_j w_j · x_t`. An fp8 handle's combine takes bf16 rows, never the fp8 dispatch output: its
//! `y` is a bf16 buffer in the dispatch output's layout, zero but for the rows of the checked
//! tokens, which the host fills once per size with the dequantized rows the dispatch delivered
//! (the identity expert; untimed). The first warm-up of every size is checked against the host
//! reference (`rshmem::ep::reference`) for the first 64 tokens of every PE (within 2^-6 of the
//! terms' magnitude for bf16 and fp8's bf16 combine; the reference computes the same roundings,
//! so normally exactly).
//!
//! Timing, the same way as `perftest/moe_nccl.py`: per iteration every PE synchronizes its
//! stream and meets the others in a host barrier, then times one call from its start to the end
//! of a stream synchronize (host clock, so launch and synchronization costs are in); the value
//! of a PE is the median over `--iters` iterations after `--warmup`, and the row reports the
//! slowest PE's median (`*_us`). `*_event_us` are the same medians measured with CUDA events
//! around the kernels alone (after a device barrier, so the PEs start together).
//! `nvlink_gbps` = bytes this PE stores into the other PEs' memory / time, mean over PEs: the
//! dispatch sends each token once per remote destination PE, or once per remote (token, expert)
//! pair in the low-latency mode when that does not go once per PE (`ll_per_pe` false:
//! `Ep::ll_per_pe`, `RSHMEM_EP_LL_PER_PE`); `sent_mb` counts the PE's own copy too (what the NCCL script's
//! all_to_all moves). A dispatched row is `dispatch_row_bytes` = `H × element size` plus, for
//! fp8, its `H/128` f32 scales (`H + H/32` bytes); a combined row `combine_row_bytes` = `H × 2`
//! for bf16 and fp8 (whose combine is bf16), `H × 4` for fp32; the combine moves as many rows
//! back as the dispatch sent: one per remote (token, PE), or one per remote (token, expert) pair
//! in the low-latency mode when `ll_per_pe` is false (`combine_nvlink_mb`). Metadata (token
//! index, experts, weights) is not counted.
//!
//! Run: `target/release/rshmemrun -n 4 target/release/moe_bench [--tokens 128,512,4096,8192]
//! [--hidden 7168] [--topk 8] [--experts 256] [--dtype bf16|f32|fp8] [--sms 0] [--ll] [--json]`

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use rshmem::cudarc::driver::sys::CUevent_flags;
use rshmem::cudarc::driver::{CudaSlice, CudaStream};
use rshmem::ep::reference::{self, Routing};
use rshmem::ep::{Ep, EpConfig, EpDtype};
use rshmem::World;
use rshmem_perftest::output::{json_f64, out, RunInfo};
use serde::Serialize;

#[derive(Parser, Debug, Serialize, Clone)]
#[command(
    name = "moe_bench",
    about = "expert-parallel MoE dispatch + combine (rshmem::ep): us per call, NVLink GB/s, tokens/s"
)]
struct Args {
    /// Tokens per PE, comma-separated.
    #[arg(long, default_value = "128,512,4096,8192", value_delimiter = ',')]
    tokens: Vec<usize>,
    /// Elements per token.
    #[arg(long, default_value_t = 7168)]
    hidden: usize,
    /// Experts per token.
    #[arg(long, default_value_t = 8)]
    topk: usize,
    /// Experts in all.
    #[arg(long, default_value_t = 256)]
    experts: usize,
    /// Element type of the dispatched tokens: bf16, f32 or fp8 (e4m3 with per-128 f32 scales;
    /// the combine runs in bf16).
    #[arg(long, default_value = "bf16")]
    dtype: String,
    /// Blocks per kernel, comma-separated (0 = every SM).
    #[arg(long, default_value = "0", value_delimiter = ',')]
    sms: Vec<u32>,
    /// Timed iterations per point.
    #[arg(long, default_value_t = 20)]
    iters: usize,
    /// Untimed iterations first.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// The low-latency mode (`Ep::ll_dispatch` / `ll_combine`; at most 256 tokens).
    #[arg(long)]
    ll: bool,
    /// JSON lines instead of a table.
    #[arg(long)]
    json: bool,
}

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Uniform routing of PE `pe`: `k` distinct experts per token, weights in (0, 1).
fn routing(pe: usize, t_n: usize, k: usize, e: usize) -> Routing {
    let mut idx = Vec::with_capacity(t_n * k);
    let mut w = Vec::with_capacity(t_n * k);
    for t in 0..t_n {
        let mut chosen: Vec<i64> = Vec::with_capacity(k);
        let mut j = 0u64;
        while chosen.len() < k {
            let c = (mix((pe as u64) << 40 ^ (t as u64) << 8 ^ j) % e as u64) as i64;
            j += 1;
            if !chosen.contains(&c) {
                chosen.push(c);
            }
        }
        for c in chosen {
            idx.push(c);
            let r = mix(c as u64 ^ (t as u64) << 20 ^ (pe as u64) << 50 ^ 0x77);
            w.push(((r % 1000) as f32 + 0.5) / 1000.0);
        }
    }
    Routing {
        num_tokens: t_n,
        topk_idx: idx,
        topk_weights: w,
    }
}

fn x_val(pe: usize, t: usize, h: usize) -> f32 {
    ((mix((pe as u64) << 48 ^ (t as u64) << 20 ^ h as u64) % 2001) as f32 - 1000.0) / 256.0
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

/// Max (or sum) over PEs of one f64 per PE, on PE 0 (other PEs get their own value back).
fn gather(world: &World, buf: &rshmem::SymBuf<'_, u64>, v: f64) -> rshmem::Result<Vec<f64>> {
    let me = world.my_pe();
    world.p(buf.at(me), v.to_bits(), 0)?;
    world.barrier_all()?;
    let all = if me == 0 {
        (0..world.n_pes())
            .map(|i| f64::from_bits(buf.read(i).unwrap_or(f64::NAN.to_bits())))
            .collect()
    } else {
        vec![v]
    };
    world.barrier_all()?;
    Ok(all)
}

#[derive(Serialize)]
struct Row {
    bench: &'static str,
    mode: &'static str,
    /// The low-latency exchange goes once per (token, PE), not per (token, expert) pair
    /// (`Ep::ll_per_pe`, `RSHMEM_EP_LL_PER_PE`).
    ll_per_pe: bool,
    dtype: String,
    tokens: usize,
    hidden: usize,
    topk: usize,
    experts: usize,
    pes: usize,
    sms: u32,
    iters: usize,
    warmup: usize,
    dispatch_us: Option<f64>,
    combine_us: Option<f64>,
    total_us: Option<f64>,
    dispatch_event_us: Option<f64>,
    combine_event_us: Option<f64>,
    dispatch_row_bytes: usize,
    combine_row_bytes: usize,
    sent_mb: Option<f64>,
    nvlink_mb: Option<f64>,
    combine_nvlink_mb: Option<f64>,
    dispatch_nvlink_gbps: Option<f64>,
    combine_nvlink_gbps: Option<f64>,
    tokens_per_s: Option<f64>,
    check: &'static str,
}

/// One size's device buffers: tokens (`x`, and their scales `s` for fp8), routing, the combine
/// output, and for fp8 the bf16 expert outputs `y` in the dispatch output's layout.
struct Bufs {
    x: CudaSlice<u8>,
    s: CudaSlice<f32>,
    idx: CudaSlice<i64>,
    w: CudaSlice<f32>,
    out: CudaSlice<u8>,
    y: CudaSlice<u16>,
}

/// PE `pe`'s first `t_n` tokens as the handle takes them: little-endian element bytes, and for
/// fp8 the per-block scales (`reference::quantize_fp8`).
fn tokens(dtype: EpDtype, pe: usize, t_n: usize, h: usize) -> (Vec<u8>, Vec<f32>) {
    let xf = (0..t_n * h).map(|i| x_val(pe, i / h, i % h));
    match dtype {
        EpDtype::F32 => (xf.flat_map(f32::to_le_bytes).collect(), Vec::new()),
        EpDtype::Bf16 => (
            xf.flat_map(|v| reference::f32_to_bf16(v).to_le_bytes())
                .collect(),
            Vec::new(),
        ),
        EpDtype::Fp8E4m3 => reference::quantize_fp8(&xf.collect::<Vec<f32>>(), h),
    }
}

/// What the combine of PE `pe` sees for its first `t_n` tokens (the identity expert): the
/// values the dispatch carried, in the combine's precision (`t_n × h`).
fn expert_out(dtype: EpDtype, pe: usize, t_n: usize, h: usize) -> Vec<f32> {
    match dtype {
        EpDtype::Fp8E4m3 => {
            let (q, sc) = tokens(dtype, pe, t_n, h);
            reference::dequantize_fp8(&q, &sc, h)
                .into_iter()
                .map(|v| reference::round_to(dtype, v))
                .collect()
        }
        _ => (0..t_n * h)
            .map(|i| reference::round_to(dtype, x_val(pe, i / h, i % h)))
            .collect(),
    }
}

/// fp8: the identity expert for the rows of source tokens below `t_check`, on the host: each
/// such row of the last dispatch's output (bytes and scales as delivered) dequantized into bf16
/// at the same row of `y`. Other rows of `y` keep what they hold.
fn fp8_identity(
    ep: &Ep<'_>,
    ll: bool,
    t_check: usize,
    y: &mut CudaSlice<u16>,
    stream: &Arc<CudaStream>,
) -> rshmem::Result<()> {
    let (h, n) = (ep.config().hidden, ep.sizes().n_pes);
    let (sw, l_n, m) = (
        ep.sizes().scale_words,
        ep.sizes().local_experts,
        ep.config().max_tokens,
    );
    let mut put = |row: usize, q: &[u8], sc: &[f32]| -> rshmem::Result<()> {
        let v: Vec<u16> = reference::dequantize_fp8(q, sc, h)
            .into_iter()
            .map(reference::f32_to_bf16)
            .collect();
        stream.memcpy_htod(&v, &mut y.slice_mut(row * h..(row + 1) * h))?;
        Ok(())
    };
    let dl = |d: &CudaSlice<i32>, len: usize| -> rshmem::Result<Vec<i32>> {
        let mut v = vec![0i32; len];
        if len > 0 {
            stream.memcpy_dtoh(&d.slice(0..len), &mut v)?;
        }
        stream.synchronize()?;
        Ok(v)
    };
    if ll {
        // Rows [l][source][rank]; (token, slot) per row.
        let counts = dl(ep.ll_count(), l_n * n)?;
        let src = dl(ep.ll_src(), l_n * n * m * 2)?;
        for (b, &cnt) in counts.iter().enumerate() {
            let cnt = (cnt.max(0) as usize).min(m);
            if !(0..cnt).any(|i| (src[(b * m + i) * 2] as usize) < t_check) {
                continue;
            }
            let bytes = ep.ll_read_rows(b / n, b % n, cnt, stream)?;
            let scales = ep.ll_read_scales(b / n, b % n, cnt, stream)?;
            for i in 0..cnt {
                if (src[(b * m + i) * 2] as usize) < t_check {
                    put(
                        b * m + i,
                        &bytes[i * h..(i + 1) * h],
                        &scales[i * sw..(i + 1) * sw],
                    )?;
                }
            }
        }
    } else {
        // Rows of every local expert, contiguous; (source PE, source token) per row.
        let mut offs = vec![0i64; l_n + 1];
        stream.memcpy_dtoh(&ep.expert_offsets().slice(0..l_n + 1), &mut offs)?;
        stream.synchronize()?;
        let rows = (offs[l_n].max(0) as usize).min(ep.sizes().max_rows);
        let src = dl(ep.expert_src(), rows * 2)?;
        let (mut q, mut sc) = (vec![0u8; h], vec![0f32; sw]);
        for r in 0..rows {
            if (src[2 * r + 1] as usize) < t_check {
                stream.memcpy_dtoh(&ep.expert_x().slice(r * h..(r + 1) * h), &mut q)?;
                stream.memcpy_dtoh(&ep.expert_scales().slice(r * sw..(r + 1) * sw), &mut sc)?;
                stream.synchronize()?;
                put(r, &q, &sc)?;
            }
        }
    }
    stream.synchronize()?;
    Ok(())
}

fn run() -> rshmem::Result<bool> {
    let args = Args::parse();
    let dtype = match args.dtype.as_str() {
        "bf16" => EpDtype::Bf16,
        "f32" => EpDtype::F32,
        "fp8" => EpDtype::Fp8E4m3,
        d => {
            eprintln!("moe_bench: --dtype {d}: expected bf16, f32 or fp8");
            return Ok(false);
        }
    };
    let fp8 = dtype == EpDtype::Fp8E4m3;
    let world = rshmem::init()?;
    let (me, n) = (world.my_pe(), world.n_pes());
    let Some(gpu) = world.gpu() else {
        eprintln!("moe_bench: needs the GPU backend (nothing measured)");
        world.finalize()?;
        return Ok(false);
    };
    let stream: Arc<CudaStream> = gpu.ctx.new_stream()?;
    let info = RunInfo::new(&world, &args);
    let gbuf = world.calloc::<u64>(n)?;
    let max_t = args.tokens.iter().copied().max().unwrap_or(0);
    let (h, k, e_all) = (args.hidden, args.topk, args.experts);
    let cd = dtype.combine_dtype();
    // Bytes per row: dispatched (the elements, and fp8's scales), combined (the combine dtype).
    let row_bytes = h * dtype.size() + 4 * dtype.scale_words(h);
    let comb_row_bytes = h * cd.size();
    let mut ok = true;
    if me == 0 && !args.json {
        out(&format!(
            "# moe_bench: {n} PEs, E {e_all}, k {k}, H {h} {dtype:?} (dispatched rows {row_bytes} B, combined rows {comb_row_bytes} B); µs: slowest PE's median of {} after {} warm-ups (host clock incl. launch + sync; event = kernels only)",
            args.iters, args.warmup
        ));
        out(&format!(
            "{:>6} {:>4} {:>11} {:>10} {:>9} {:>9} {:>9} {:>10} {:>10} {:>12} {:>6}",
            "T",
            "sms",
            "dispatch_us",
            "combine_us",
            "disp_ev",
            "comb_ev",
            "nvlinkMB",
            "disp_GB/s",
            "comb_GB/s",
            "tokens/s",
            "check"
        ));
    }
    for &sms in &args.sms {
        let cfg = EpConfig {
            num_sms: (sms > 0).then_some(sms),
            low_latency: args.ll,
            ..EpConfig::new(e_all, h, k, max_t, dtype)
        };
        let ep = Ep::new(&world, cfg)?;
        // fp8's y: bf16 rows in the layout of the mode's dispatch output.
        let y_rows = if !fp8 {
            0
        } else if args.ll {
            e_all * max_t
        } else {
            ep.sizes().max_rows
        };
        for &t_n in &args.tokens {
            let r = routing(me, t_n, k, e_all);
            let (xs, ss) = tokens(dtype, me, t_n, h);
            let nz = |v: usize| v.max(1);
            let mut b = Bufs {
                x: stream.alloc_zeros::<u8>(nz(xs.len()))?,
                s: stream.alloc_zeros::<f32>(nz(ss.len()))?,
                idx: stream.alloc_zeros::<i64>(nz(r.topk_idx.len()))?,
                w: stream.alloc_zeros::<f32>(nz(r.topk_weights.len()))?,
                out: stream.alloc_zeros::<u8>(nz(t_n * comb_row_bytes))?,
                y: stream.alloc_zeros::<u16>(nz(y_rows * h))?,
            };
            if t_n > 0 {
                stream.memcpy_htod(&xs, &mut b.x)?;
                if fp8 {
                    stream.memcpy_htod(&ss, &mut b.s)?;
                }
                stream.memcpy_htod(&r.topk_idx, &mut b.idx)?;
                stream.memcpy_htod(&r.topk_weights, &mut b.w)?;
            }
            stream.synchronize()?;
            let (xa, _g1) = rshmem::cudarc::driver::DevicePtr::device_ptr(&b.x, &stream);
            let (sa, _g0) = rshmem::cudarc::driver::DevicePtr::device_ptr(&b.s, &stream);
            let (ia, _g2) = rshmem::cudarc::driver::DevicePtr::device_ptr(&b.idx, &stream);
            let (wa, _g3) = rshmem::cudarc::driver::DevicePtr::device_ptr(&b.w, &stream);
            let (oa, _g4) = rshmem::cudarc::driver::DevicePtr::device_ptr(&b.out, &stream);
            // y's guard ends here: fp8_identity writes y on this same stream, ordered before
            // the combines that read it.
            let ya = rshmem::cudarc::driver::DevicePtr::device_ptr(&b.y, &stream).0;
            // The expert outputs the combine reads: the dispatch output itself (identity expert
            // in place), or fp8's bf16 y.
            let y_addr = if fp8 {
                ya
            } else if args.ll {
                ep.ll_recv_x_addr()
            } else {
                ep.expert_x_addr()
            };
            // The calls of the mode measured. Every address given to them is one of this
            // size's buffers (x, s, idx, w: t_n tokens; out: t_n rows; y: the dispatch
            // output's rows), alive until the end of this size's loop, or the handle's own
            // output.
            let dispatch = || {
                // SAFETY: see above: live device memory of this context of the right sizes.
                unsafe {
                    match (args.ll, fp8) {
                        (false, false) => ep.dispatch_raw(xa, ia, wa, t_n, &stream),
                        (false, true) => ep.dispatch_fp8_raw(xa, sa, ia, wa, t_n, &stream),
                        (true, false) => ep.ll_dispatch_raw(xa, ia, t_n, &stream),
                        (true, true) => ep.ll_dispatch_fp8_raw(xa, sa, ia, t_n, &stream),
                    }
                }
            };
            let combine = || {
                if args.ll {
                    // SAFETY: see above: live device memory of this context of the right sizes.
                    unsafe { ep.ll_combine_raw(y_addr, wa, oa, &stream) }
                } else {
                    // SAFETY: see above: live device memory of this context of the right sizes.
                    unsafe { ep.combine_raw(y_addr, oa, &stream) }
                }
            };
            // The low-latency dispatch and combine go once per (token, PE) (the same on every PE).
            let ll_per_pe = args.ll && ep.ll_per_pe();
            let (mut d_host, mut c_host, mut d_ev, mut c_ev) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            let mut check = "ok";
            // The first 64 tokens of the first warm-up's host-timed combine (checked below).
            let tc_n = t_n.min(64);
            let mut got = vec![0u8; tc_n * comb_row_bytes];
            for it in 0..args.warmup + args.iters {
                stream.synchronize()?;
                world.barrier_all()?;
                let t0 = Instant::now();
                dispatch()?;
                stream.synchronize()?;
                let td = t0.elapsed().as_secs_f64() * 1e6;
                if it == 0 && fp8 {
                    // The identity expert for the checked tokens' rows (the row order within
                    // an expert may change from one dispatch to the next, so y is right for
                    // this dispatch's combine only; later combines time the same work on
                    // whatever y holds).
                    fp8_identity(&ep, args.ll, tc_n, &mut b.y, &stream)?;
                }
                world.barrier_all()?;
                let t1 = Instant::now();
                combine()?;
                stream.synchronize()?;
                let tc = t1.elapsed().as_secs_f64() * 1e6;
                if it == 0 && tc_n > 0 {
                    stream.memcpy_dtoh(&b.out.slice(0..tc_n * comb_row_bytes), &mut got)?;
                    stream.synchronize()?;
                }
                // The same pair timed with events around the kernels only.
                world.barrier_all_on_stream(&stream)?;
                let a = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
                dispatch()?;
                let bv = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
                world.barrier_all_on_stream(&stream)?;
                let c = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
                combine()?;
                let d = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
                d.synchronize()?;
                if it == 0 {
                    if let Err(e) = ep.check(&stream) {
                        eprintln!("PE {me}: moe_bench T {t_n}: {e}");
                        check = "FAIL";
                    }
                    // The first 64 tokens' combine against the reference.
                    let cut = |pe: usize| {
                        let rr = routing(pe, t_n, k, e_all);
                        Routing {
                            num_tokens: tc_n,
                            topk_idx: rr.topk_idx[..tc_n * k].to_vec(),
                            topk_weights: rr.topk_weights[..tc_n * k].to_vec(),
                        }
                    };
                    let routs: Vec<Routing> = (0..n).map(cut).collect();
                    let yv = expert_out(dtype, me, tc_n, h);
                    let yf = |_e: usize, t: usize| -> Vec<f32> { yv[t * h..(t + 1) * h].to_vec() };
                    let want = if ll_per_pe {
                        reference::combine_ll_per_pe(&routs[me], e_all, k, n, h, dtype, &yf)
                    } else if args.ll {
                        reference::combine_ll(&routs[me], e_all, k, h, dtype, &yf)
                    } else {
                        reference::combine(&routs, e_all, k, me, h, dtype, &yf)
                    };
                    let bad = (0..tc_n * h)
                        .filter(|&i| {
                            let g = match cd {
                                EpDtype::F32 => f32::from_le_bytes([
                                    got[4 * i],
                                    got[4 * i + 1],
                                    got[4 * i + 2],
                                    got[4 * i + 3],
                                ]),
                                _ => reference::bf16_to_f32(u16::from_le_bytes([
                                    got[2 * i],
                                    got[2 * i + 1],
                                ])),
                            };
                            // Within 2^-6 (bf16) / 2^-20 (fp32) of Σ_j |w_j·y|: the kernels
                            // compute what the reference computes, so this is normally exact.
                            let t = i / h;
                            let wsum: f32 = routs[me].topk_weights[t * k..(t + 1) * k]
                                .iter()
                                .map(|w| w.abs())
                                .sum();
                            let mag = wsum * yv[i].abs();
                            let rel = match cd {
                                EpDtype::F32 => 1.0 / 1048576.0,
                                _ => 1.0 / 64.0,
                            };
                            (g - want[i]).abs() > mag * rel || g.is_nan()
                        })
                        .count();
                    if bad > 0 {
                        eprintln!(
                            "PE {me}: moe_bench T {t_n}: {bad} of {} combine elements differ from the reference",
                            tc_n * h
                        );
                        check = "FAIL";
                    }
                }
                if it >= args.warmup {
                    d_host.push(td);
                    c_host.push(tc);
                    d_ev.push(a.elapsed_ms(&bv)? as f64 * 1e3);
                    c_ev.push(c.elapsed_ms(&d)? as f64 * 1e3);
                }
            }
            // Rows this PE stores into each PE: the dispatch sends each token once per
            // destination PE (the normal mode, and the low-latency mode going once per PE) or
            // once per (token, expert) pair (the low-latency mode otherwise); the combine sends
            // as many rows back.
            let per_pair = if args.ll {
                let l = e_all / n;
                let mut v = vec![0usize; n];
                for t in 0..t_n {
                    for (_, e, _) in r.slots(t, k, e_all) {
                        v[e / l] += 1;
                    }
                }
                Some(v)
            } else {
                None
            };
            let per_pe = reference::tokens_sent(&r, e_all, k, n);
            let sent = match per_pair {
                Some(v) if !ll_per_pe => v,
                _ => per_pe,
            };
            let back = &sent;
            let all_rows = sent.iter().sum::<usize>() as f64;
            let remote = |v: &[usize]| {
                v.iter()
                    .enumerate()
                    .filter(|&(d, _)| d != me)
                    .map(|(_, &s)| s)
                    .sum::<usize>() as f64
            };
            let (remote_rows, remote_back) = (remote(&sent), remote(back));
            let vals = [
                median(&mut d_host),
                median(&mut c_host),
                median(&mut d_ev),
                median(&mut c_ev),
                all_rows * row_bytes as f64 / 1e6,
                remote_rows * row_bytes as f64 / 1e6,
                remote_back * comb_row_bytes as f64 / 1e6,
                if check == "ok" { 0.0 } else { 1.0 },
            ];
            let mut g = Vec::new();
            for v in vals {
                g.push(gather(&world, &gbuf, v)?);
            }
            if me == 0 {
                let maxv = |i: usize| g[i].iter().copied().fold(f64::NAN, f64::max);
                let mean = |i: usize| g[i].iter().sum::<f64>() / g[i].len() as f64;
                let (dus, cus, dev, cev) = (maxv(0), maxv(1), maxv(2), maxv(3));
                let (d_mb, c_mb) = (mean(5), mean(6));
                let failed = g[7].iter().any(|&v| v != 0.0);
                if failed {
                    ok = false;
                }
                let row = Row {
                    bench: "moe_bench",
                    mode: if args.ll { "low_latency" } else { "normal" },
                    ll_per_pe,
                    dtype: args.dtype.clone(),
                    tokens: t_n,
                    hidden: h,
                    topk: k,
                    experts: e_all,
                    pes: n,
                    sms: ep.num_sms(),
                    iters: args.iters,
                    warmup: args.warmup,
                    dispatch_us: json_f64(dus),
                    combine_us: json_f64(cus),
                    total_us: json_f64(dus + cus),
                    dispatch_event_us: json_f64(dev),
                    combine_event_us: json_f64(cev),
                    dispatch_row_bytes: row_bytes,
                    combine_row_bytes: comb_row_bytes,
                    sent_mb: json_f64(mean(4)),
                    nvlink_mb: json_f64(d_mb),
                    combine_nvlink_mb: json_f64(c_mb),
                    dispatch_nvlink_gbps: json_f64(d_mb * 1e6 / (dus * 1e-6) / 1e9),
                    combine_nvlink_gbps: json_f64(c_mb * 1e6 / (cus * 1e-6) / 1e9),
                    tokens_per_s: json_f64(t_n as f64 / ((dus + cus) * 1e-6)),
                    check: if failed { "FAIL" } else { "ok" },
                };
                if args.json {
                    out(&info.line(&row));
                } else {
                    out(&format!(
                        "{:>6} {:>4} {:>11.1} {:>10.1} {:>9.1} {:>9.1} {:>9.1} {:>10.1} {:>10.1} {:>12.0} {:>6}",
                        t_n,
                        row.sms,
                        dus,
                        cus,
                        dev,
                        cev,
                        d_mb,
                        d_mb * 1e3 / dus,
                        c_mb * 1e3 / cus,
                        t_n as f64 / ((dus + cus) * 1e-6),
                        row.check
                    ));
                }
            }
        }
        world.barrier_all()?;
        ep.free()?;
    }
    world.free(gbuf)?;
    world.finalize()?;
    Ok(ok)
}

fn main() -> ExitCode {
    rshmem::init_logging();
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("moe_bench: {e}");
            ExitCode::FAILURE
        }
    }
}
