//! `stream`: every stream-ordered call of the GPU backend (put/get/p/g/put_signal/signal_op/
//! signal_wait_until/quiet/barrier/sync `_on_stream`) on a ring, with per-PE patterns at an
//! offset inside the allocation and poisoned targets, plus the argument errors; and a user kernel
//! loaded through `load_module` that reads its device state. On the CPU backend it checks that
//! these calls answer `Unsupported` naming the call, and says so.

use rshmem::cudarc::driver::{CudaStream, LaunchConfig, PushKernelArg};
use rshmem::{Cmp, Error, SignalOp};

use crate::check::{expect_eq, expect_err, Context, Ctx, Kind, R};
use crate::ensure;

const KERNEL: &str = r#"
#include "rshmem/rshmem.cuh"
extern "C" __global__ void whoami(int *out) {
    out[0] = rshmem_my_pe();
    out[1] = rshmem_n_pes();
    out[2] = (int)rshmem_state.version;
}
"#;

fn pat(pe: usize, i: usize) -> u32 {
    (pe as u32 + 1).wrapping_mul(0x9E37_79B9) ^ (i as u32).wrapping_mul(0x85EB_CA6B)
}

pub fn run(c: &Ctx<'_>) -> R {
    let w = c.w;
    let Some(gpu) = w.gpu() else {
        match w.load_module(KERNEL) {
            Err(Error::Unsupported {
                call: "load_module",
                ..
            }) => {}
            other => {
                return Err(crate::check::Fail(format!(
                    "load_module on the CPU backend: expected Unsupported, got {other:?}"
                )))
            }
        }
        crate::note!(
            "PE {}: stream: CPU backend, only the Unsupported answers were checked",
            c.me
        );
        return Ok(());
    };
    let stream = gpu
        .ctx
        .new_stream()
        .map_err(|e| crate::check::Fail(format!("new_stream: {e:?}")))?;
    rma(c, &stream)?;
    signals(c, &stream)?;
    quiet_and_sync(c, &stream)?;
    errors(c, &stream)?;
    kernel(c, &stream)?;
    Ok(())
}

/// How long a stream may take to drain before the scenario fails instead of hanging.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(20);

/// Waits until everything queued on `s` so far has run, for at most [`DRAIN`]; `what` names
/// the step in the failure (a stream-ordered wait that is never satisfied spins on the GPU, and
/// a plain synchronize would never return).
fn sync(s: &CudaStream, what: &str) -> R {
    let fail = |e| crate::check::Fail(format!("{what}: stream: {e:?}"));
    let done = s.record_event(None).map_err(fail)?;
    let t0 = std::time::Instant::now();
    while !done.try_is_complete().map_err(fail)? {
        if t0.elapsed() > DRAIN {
            return Err(crate::check::Fail(format!(
                "{what}: the stream did not drain in {DRAIN:?}"
            )));
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    Ok(())
}

fn rma(c: &Ctx<'_>, s: &CudaStream) -> R {
    let (w, me) = (c.w, c.me);
    const N: usize = 1001;
    const OFF: usize = 3;
    let src = w.malloc::<u32>(N + 2 * OFF).ctx("malloc")?;
    let dst = w.malloc::<u32>(N + 2 * OFF).ctx("malloc")?;
    let got = w.malloc::<u32>(N + 2 * OFF).ctx("malloc")?;
    src.copy_from_slice(&(0..N + 2 * OFF).map(|i| pat(me, i)).collect::<Vec<_>>())
        .ctx("fill")?;
    dst.copy_from_slice(&vec![0xDEAD_BEEF; N + 2 * OFF])
        .ctx("poison")?;
    got.copy_from_slice(&vec![0xDEAD_BEEF; N + 2 * OFF])
        .ctx("poison")?;
    c.barrier("stream rma setup")?;
    // put my src[OFF..OFF+N] into succ's dst[OFF..]; get pred's src[OFF..] into my got[OFF..].
    w.put_on_stream(dst.at(OFF), src.at(OFF), N, c.succ(), s)
        .ctx("put_on_stream")?;
    w.get_on_stream(got.at(OFF), src.at(OFF), N, c.pred(), s)
        .ctx("get_on_stream")?;
    w.barrier_all_on_stream(s).ctx("barrier_all_on_stream")?;
    sync(s, "put/get_on_stream + barrier_all_on_stream")?;
    let d = dst.to_vec().ctx("to_vec")?;
    let g = got.to_vec().ctx("to_vec")?;
    for i in 0..N + 2 * OFF {
        let inside = (OFF..OFF + N).contains(&i);
        let want = if inside {
            pat(c.pred(), i)
        } else {
            0xDEAD_BEEF
        };
        ensure!(
            d[i] == want,
            "put_on_stream: dst[{i}] = {:#x}, want {want:#x}",
            d[i]
        );
        ensure!(
            g[i] == want,
            "get_on_stream: got[{i}] = {:#x}, want {want:#x}",
            g[i]
        );
    }
    // p_on_stream: an 8-byte word (command path) and a 2-byte value (copy path).
    let words = w.calloc::<u64>(2).ctx("calloc")?;
    let halves = w.calloc::<u16>(3).ctx("calloc")?;
    c.barrier("p setup")?;
    w.p_on_stream(words.at(1), 0xABCD_0000_0000 + me as u64, c.succ(), s)
        .ctx("p_on_stream u64")?;
    w.p_on_stream(halves.at(2), 0x7000 + me as u16, c.succ(), s)
        .ctx("p_on_stream u16")?;
    w.barrier_all_on_stream(s).ctx("barrier_all_on_stream")?;
    sync(s, "p_on_stream + barrier_all_on_stream")?;
    expect_eq(
        "p_on_stream u64",
        vec![0, 0xABCD_0000_0000 + c.pred() as u64],
        words.to_vec().ctx("to_vec")?,
    )?;
    expect_eq(
        "p_on_stream u16",
        vec![0, 0, 0x7000 + c.pred() as u16],
        halves.to_vec().ctx("to_vec")?,
    )?;
    let v = w.g_on_stream(words.at(1), c.succ(), s).ctx("g_on_stream")?;
    expect_eq(
        "g_on_stream of succ's word (written by me)",
        0xABCD_0000_0000 + me as u64,
        v,
    )?;
    c.barrier("stream rma end")?;
    w.free(halves).ctx("free")?;
    w.free(words).ctx("free")?;
    w.free(got).ctx("free")?;
    w.free(dst).ctx("free")?;
    w.free(src).ctx("free")
}

fn signals(c: &Ctx<'_>, s: &CudaStream) -> R {
    let (w, me) = (c.w, c.me);
    const N: usize = 4096 + 5;
    let src = w.malloc::<u32>(N).ctx("malloc")?;
    let dst = w.malloc::<u32>(N).ctx("malloc")?;
    let sig = w.calloc::<u64>(2).ctx("calloc")?;
    src.copy_from_slice(&(0..N).map(|i| pat(me, i)).collect::<Vec<_>>())
        .ctx("fill")?;
    dst.copy_from_slice(&vec![0; N]).ctx("poison")?;
    c.barrier("signal setup")?;
    for round in 1..=3u64 {
        w.put_signal_on_stream(
            dst.as_ptr(),
            src.as_ptr(),
            N,
            sig.as_ptr(),
            1,
            SignalOp::Add,
            c.succ(),
            s,
        )
        .ctx("put_signal_on_stream")?;
        w.signal_wait_until_on_stream(sig.as_ptr(), Cmp::Ge, round, s)
            .ctx("signal_wait_until_on_stream")?;
        sync(
            s,
            &format!("put_signal_on_stream + signal_wait_until_on_stream, round {round}"),
        )?;
        let d = dst.to_vec().ctx("to_vec")?;
        if let Some(i) = (0..N).find(|&i| d[i] != pat(c.pred(), i)) {
            return Err(crate::check::Fail(format!(
                "put_signal_on_stream round {round}: dst[{i}] = {:#x}, want {:#x} (signal {})",
                d[i],
                pat(c.pred(), i),
                w.signal_fetch(sig.as_ptr()).unwrap_or(0)
            )));
        }
        // Nobody starts the next round before everyone checked this one.
        w.sync_all_on_stream(s).ctx("sync_all_on_stream")?;
        sync(s, &format!("sync_all_on_stream after round {round}"))?;
    }
    expect_eq(
        "signal after 3 rounds",
        3,
        w.signal_fetch(sig.as_ptr()).ctx("signal_fetch")?,
    )?;
    w.signal_op_on_stream(sig.at(1), 42 + me as u64, SignalOp::Set, c.succ(), s)
        .ctx("signal_op_on_stream")?;
    w.signal_wait_until_on_stream(sig.at(1), Cmp::Eq, 42 + c.pred() as u64, s)
        .ctx("signal_wait_until_on_stream Eq")?;
    sync(
        s,
        "signal_op_on_stream Set + signal_wait_until_on_stream Eq",
    )?;
    expect_eq(
        "signal_op_on_stream Set",
        42 + c.pred() as u64,
        w.signal_fetch(sig.at(1)).ctx("signal_fetch")?,
    )?;
    c.barrier("signal end")?;
    w.free(sig).ctx("free")?;
    w.free(dst).ctx("free")?;
    w.free(src).ctx("free")
}

fn quiet_and_sync(c: &Ctx<'_>, s: &CudaStream) -> R {
    let (w, me) = (c.w, c.me);
    let buf = w.calloc::<u64>(64).ctx("calloc")?;
    c.barrier("quiet setup")?;
    // Host-issued puts (queued on rshmem's stream), ordered before the user stream's barrier by
    // quiet_on_stream; barrier_all_on_stream does the same itself.
    let vals: Vec<u64> = (0..64).map(|i| (me as u64) << 32 | i).collect();
    w.putmem_nbi(buf.as_ptr().cast(), as_bytes(&vals), c.succ())
        .ctx("putmem_nbi")?;
    w.quiet_on_stream(s).ctx("quiet_on_stream")?;
    w.barrier_all_on_stream(s).ctx("barrier_all_on_stream")?;
    sync(s, "quiet_on_stream + barrier_all_on_stream")?;
    let want: Vec<u64> = (0..64).map(|i| (c.pred() as u64) << 32 | i).collect();
    expect_eq(
        "host putmem_nbi + quiet_on_stream + barrier_all_on_stream",
        want,
        buf.to_vec().ctx("to_vec")?,
    )?;
    c.barrier("quiet end")?;
    w.free(buf).ctx("free")
}

fn as_bytes(v: &[u64]) -> &[u8] {
    // SAFETY: u64 has no padding; the byte view covers exactly the slice.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
}

fn errors(c: &Ctx<'_>, s: &CudaStream) -> R {
    let w = c.w;
    let buf = w.calloc::<u64>(8).ctx("calloc")?;
    let local = [0u64; 8];
    c.barrier("errors setup")?;
    expect_err(
        "pe out of range",
        w.put_on_stream(buf.as_ptr(), buf.as_ptr(), 8, c.n, s),
        Kind::Invalid,
        "put_on_stream",
    )?;
    expect_err(
        "src not symmetric",
        w.put_on_stream(buf.as_ptr(), local.as_ptr(), 8, 0, s),
        Kind::NotSymmetric,
        "put_on_stream",
    )?;
    expect_err(
        "range past the end",
        w.get_on_stream(buf.as_ptr(), buf.as_ptr(), 9, 0, s),
        Kind::NotSymmetric,
        "get_on_stream",
    )?;
    let odd = buf.as_ptr().cast::<u8>().wrapping_add(4).cast::<u64>();
    expect_err(
        "misaligned signal",
        w.put_signal_on_stream(buf.as_ptr(), buf.as_ptr(), 1, odd, 1, SignalOp::Set, 0, s),
        Kind::Invalid,
        "put_signal_on_stream",
    )?;
    expect_err(
        "misaligned wait",
        w.signal_wait_until_on_stream(odd, Cmp::Eq, 1, s),
        Kind::Invalid,
        "signal_wait_until_on_stream",
    )?;
    sync(s, "the refused calls")?;
    expect_eq(
        "nothing written by the failed calls",
        vec![0u64; 8],
        buf.to_vec().ctx("to_vec")?,
    )?;
    c.barrier("errors end")?;
    w.free(buf).ctx("free")
}

fn kernel(c: &Ctx<'_>, s: &CudaStream) -> R {
    let w = c.w;
    let out = w.calloc::<i32>(3).ctx("calloc")?;
    let m = w.load_module(KERNEL).ctx("load_module")?;
    let f = m.function("whoami").ctx("function")?;
    let p = out.as_ptr() as u64;
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (1, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: whoami(int*) gets the address of a live 3-element symmetric allocation.
    unsafe { s.launch_builder(&f).arg(&p).launch(cfg) }
        .map_err(|e| crate::check::Fail(format!("launch: {e:?}")))?;
    sync(s, "the user kernel")?;
    let st = w.device_state();
    expect_eq(
        "device state seen by a user kernel (my_pe, n_pes, version)",
        vec![c.me as i32, c.n as i32, st.version as i32],
        out.to_vec().ctx("to_vec")?,
    )?;
    c.barrier("kernel end")?;
    w.free(out).ctx("free")
}
