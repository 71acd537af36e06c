//! `overlap`: the stream collectives make progress while the GPU is busy with the user's own
//! work. Every PE first starts a long-running compute kernel on a second stream whose blocks each
//! take a whole SM (all the shared memory a block may have) and that runs until this PE tells it
//! to stop: together the PEs' kernels hold most of the GPU's SMs (with several PEs on one GPU,
//! each PE takes its share). Only when every block of every PE's kernel is running do the
//! collectives start, on the world team and on the even-PE split: alltoall, fcollect, broadcast
//! (from the first and the last team PE), sum reduce and max reducescatter on i32, collect with
//! uneven counts and barrier_on_stream, at sizes that take one block, several blocks and (from
//! 2 MiB per PE, the pipelined broadcast) a full grid, each checked against references computed
//! here (after one warm-up round at one element, before the compute kernel starts: CUDA loads
//! kernels lazily, and loading one waits for the running kernels, so a program that overlaps
//! makes its first collective calls before its long kernels). A collective whose blocks waited for blocks that cannot get an SM would time out (the
//! device timeout traps). After the last collective the compute kernel must still be running
//! (it only ends when told, or by giving up after a long limit, which fails the scenario); then
//! it is stopped. On the CPU backend: nothing to check, says so.

use rshmem::cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use rshmem::cudarc::driver::{CudaStream, LaunchConfig, PushKernelArg};
use rshmem::{Max, Sum, SymBuf, Team, World};

use crate::check::{expect_eq, Context, Ctx, R};
use crate::ensure;

/// Elements (i32) per PE: one block, several blocks, past the pipelined broadcast (2 MiB).
const SIZES: &[usize] = &[1, 5000, 70_001, 600_000];
const POISON: i32 = -0x3C3C_3C3D;
/// The compute kernel gives up (and the scenario fails) after this long.
const BUSY_LIMIT_NS: u64 = 90_000_000_000;

const BUSY_KERNEL: &str = r#"
// Runs until *stop != 0 (or limit_ns passes: then ctl[1] counts the block). ctl[0] counts the
// blocks that started. Every thread computes; the dynamic shared memory (as much as a block may
// have) keeps every other block off the SM.
extern "C" __global__ void busy(volatile unsigned long long* stop, unsigned long long* ctl,
                                unsigned long long limit_ns, float* sink) {
    extern __shared__ float smem[];
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    if (threadIdx.x == 0) atomicAdd(&ctl[0], 1ull);
    float acc = (float)threadIdx.x;
    for (;;) {
        for (int i = 0; i < 4096; ++i) acc = acc * 0.9999f + 1.0f;
        smem[threadIdx.x] = acc;
        if (*stop != 0) break;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > limit_ns) {
            if (threadIdx.x == 0) atomicAdd(&ctl[1], 1ull);
            break;
        }
    }
    __syncthreads();
    if (threadIdx.x == 0 && smem[blockDim.x - 1] == 12345.0f) sink[0] = acc;
}
"#;

fn fail(s: String) -> crate::check::Fail {
    crate::check::Fail(s)
}

fn input(pe: usize, i: usize, salt: usize) -> i32 {
    let x = (pe as u64 * 0x9E37_79B9 + i as u64 * 0x85EB_CA6B + salt as u64 * 0xC2B2_AE35)
        .wrapping_mul(0x2545_F491_4F6C_DD1D);
    ((x >> 40) as i32 % 2001) - 1000
}

pub fn run(c: &Ctx<'_>) -> R {
    let w = c.w;
    let Some(gpu) = w.gpu() else {
        crate::note!(
            "PE {}: overlap: CPU backend, nothing to check (the stream collectives need a CUDA stream)",
            c.me
        );
        return Ok(());
    };
    let ctx = &gpu.ctx;
    let attr = |a| {
        ctx.attribute(a)
            .map_err(|e| fail(format!("device attribute {a:?}: {e:?}")))
    };
    let sms = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as usize;
    let smem = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
    let share = w.gpu_sharing().pes_on_gpu.max(1);
    // Leave an eighth of the SMs (at least 8) to the collectives; the rest is the compute
    // kernels', split among the PEs on this GPU.
    let free = (sms / 8).max(8).min(sms.saturating_sub(1)).max(1);
    let busy_blocks = ((sms - free) / share).max(1);
    let threads = 256u32;

    let busy_stream = ctx
        .new_stream()
        .map_err(|e| fail(format!("new_stream: {e:?}")))?;
    let coll_stream = ctx
        .new_stream()
        .map_err(|e| fail(format!("new_stream: {e:?}")))?;
    let stop = w.calloc::<u64>(1).ctx("calloc stop")?;
    let ctl = w.calloc::<u64>(2).ctx("calloc ctl")?;
    let sink = w.calloc::<f32>(1).ctx("calloc sink")?;
    let module = w.load_module(BUSY_KERNEL).ctx("load_module busy")?;
    let f = module.function("busy").ctx("function busy")?;
    f.set_attribute(
        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        smem,
    )
    .map_err(|e| fail(format!("set max dynamic shared memory {smem}: {e:?}")))?;
    let (sp, cp, kp, lim) = (
        stop.as_ptr() as u64,
        ctl.as_ptr() as u64,
        sink.as_ptr() as u64,
        BUSY_LIMIT_NS,
    );
    let cfg = LaunchConfig {
        grid_dim: (busy_blocks as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    let cap = SIZES.iter().copied().max().unwrap_or(1) * c.n;
    let src = w.malloc::<i32>(cap).ctx("malloc src")?;
    let dst = w.malloc::<i32>(cap + 8).ctx("malloc dst")?;
    let world = w.team_world();
    let mut teams = vec![("world", world.clone())];
    if let Some(t) = w
        .team_split_strided(&world, 0, 2, c.n.div_ceil(2))
        .ctx("team_split_strided")?
    {
        teams.push(("even", t));
    }
    // Warm-up: loads the collective kernels while the GPU is idle.
    for (name, t) in &teams {
        Round {
            w,
            s: &coll_stream,
            t,
            name,
            m: 1,
        }
        .all(&src, &dst)?;
    }
    w.barrier_all()
        .ctx("barrier_all before the compute kernel")?;
    // SAFETY: busy(u64*, u64*, u64, float*) with symmetric allocations of 1, 2 and 1 elements;
    // `threads` floats of dynamic shared memory fit in `smem` bytes.
    unsafe {
        busy_stream
            .launch_builder(&f)
            .arg(&sp)
            .arg(&cp)
            .arg(&lim)
            .arg(&kp)
            .launch(cfg)
    }
    .map_err(|e| fail(format!("launch busy: {e:?}")))?;
    // Every block of the compute kernel must be running before the collectives start.
    let t0 = std::time::Instant::now();
    loop {
        let v = ctl.to_vec().ctx("read ctl")?;
        if v[0] as usize == busy_blocks {
            break;
        }
        ensure!(
            t0.elapsed().as_secs() < 60,
            "PE {}: only {} of the compute kernel's {busy_blocks} blocks started within 60 s",
            c.me,
            v[0]
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    w.barrier_all()
        .ctx("barrier_all with every compute kernel running")?;
    if c.me == 0 {
        crate::note!(
            "overlap: {sms} SMs, {share} PE(s) on this GPU, each PE's compute kernel holds {busy_blocks} SMs"
        );
    }

    for (name, t) in &teams {
        for &m in SIZES {
            let b = Round {
                w,
                s: &coll_stream,
                t,
                name,
                m,
            };
            b.all(&src, &dst)?;
        }
    }
    coll_stream
        .synchronize()
        .map_err(|e| fail(format!("synchronize the collectives' stream: {e:?}")))?;
    let v = ctl.to_vec().ctx("read ctl")?;
    ensure!(
        v[1] == 0,
        "PE {}: the compute kernel gave up before the collectives were done",
        c.me
    );
    w.barrier_all().ctx("barrier_all after the collectives")?;
    stop.copy_from_slice(&[1]).ctx("stop the compute kernel")?;
    busy_stream
        .synchronize()
        .map_err(|e| fail(format!("synchronize the compute kernel: {e:?}")))?;
    let v = ctl.to_vec().ctx("read ctl")?;
    ensure!(
        v[1] == 0,
        "PE {}: {} compute blocks gave up after {} s (the stop word did not reach them)",
        c.me,
        v[1],
        BUSY_LIMIT_NS / 1_000_000_000
    );
    for (_, t) in teams.into_iter().skip(1) {
        w.team_destroy(t).ctx("team_destroy")?;
    }
    c.barrier("overlap end")?;
    w.free(dst).ctx("free")?;
    w.free(src).ctx("free")?;
    w.free(sink).ctx("free")?;
    w.free(ctl).ctx("free")?;
    w.free(stop).ctx("free")
}

struct Round<'a> {
    w: &'a World,
    s: &'a CudaStream,
    t: &'a Team,
    name: &'a str,
    m: usize,
}

impl Round<'_> {
    fn what(&self, coll: &str) -> String {
        format!(
            "{coll} on team {} with {} elements per PE, next to the compute kernel",
            self.name, self.m
        )
    }

    fn prepare(&self, src: &SymBuf<'_, i32>, dst: &SymBuf<'_, i32>, len: usize, salt: usize) -> R {
        let me = self.w.my_pe();
        src.copy_from_slice(&(0..len).map(|i| input(me, i, salt)).collect::<Vec<_>>())
            .ctx("fill src")?;
        dst.copy_from_slice(&vec![POISON; len + 8])
            .ctx("poison dst")?;
        self.w.team_sync(self.t).ctx("team_sync")
    }

    fn check(&self, coll: &str, dst: &SymBuf<'_, i32>, want: Vec<i32>) -> R {
        self.s
            .synchronize()
            .map_err(|e| fail(format!("{}: synchronize: {e:?}", self.what(coll))))?;
        let got = dst.to_vec().ctx("read dst")?;
        let k = want.len();
        expect_eq(self.what(coll), want, got[..k].to_vec())?;
        expect_eq(
            format!("{} (the 8 elements after the result)", self.what(coll)),
            vec![POISON; 8],
            got[k..k + 8].to_vec(),
        )
    }

    fn all(&self, src: &SymBuf<'_, i32>, dst: &SymBuf<'_, i32>) -> R {
        let (w, t, s, m) = (self.w, self.t, self.s, self.m);
        let n = t.n_pes();
        let me = t.my_pe();
        let wp = |j: usize| t.members()[j];
        let err = |coll: &str, e: rshmem::Error| fail(format!("{}: {e}", self.what(coll)));

        self.prepare(src, dst, n * m, 1)?;
        w.alltoall_on_stream(t, dst.as_ptr(), src.as_ptr(), m, s)
            .map_err(|e| err("alltoall_on_stream", e))?;
        let want = (0..n * m)
            .map(|i| input(wp(i / m), me * m + i % m, 1))
            .collect();
        self.check("alltoall_on_stream", dst, want)?;

        self.prepare(src, dst, n * m, 2)?;
        w.fcollect_on_stream(t, dst.as_ptr(), src.as_ptr(), m, s)
            .map_err(|e| err("fcollect_on_stream", e))?;
        let want = (0..n * m).map(|i| input(wp(i / m), i % m, 2)).collect();
        self.check("fcollect_on_stream", dst, want)?;

        for root in [0, n - 1] {
            self.prepare(src, dst, m, 3 + root)?;
            w.broadcast_on_stream(t, dst.as_ptr(), src.as_ptr(), m, root, s)
                .map_err(|e| err("broadcast_on_stream", e))?;
            let want = (0..m).map(|i| input(wp(root), i, 3 + root)).collect();
            self.check(&format!("broadcast_on_stream from {root}"), dst, want)?;
        }

        self.prepare(src, dst, m, 7)?;
        w.reduce_on_stream(t, dst.as_ptr(), src.as_ptr(), m, Sum, s)
            .map_err(|e| err("sum reduce_on_stream", e))?;
        let want = (0..m)
            .map(|i| (0..n).fold(0i32, |a, j| a.wrapping_add(input(wp(j), i, 7))))
            .collect();
        self.check("sum reduce_on_stream", dst, want)?;

        self.prepare(src, dst, n * m, 8)?;
        w.reducescatter_on_stream(t, dst.as_ptr(), src.as_ptr(), m, Max, s)
            .map_err(|e| err("max reducescatter_on_stream", e))?;
        let want = (0..m)
            .map(|i| {
                (0..n)
                    .map(|j| input(wp(j), me * m + i, 8))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        self.check("max reducescatter_on_stream", dst, want)?;

        // collect: team PE j contributes m - j elements (at least 1).
        let cnt = |j: usize| m.saturating_sub(j).max(1);
        self.prepare(src, dst, n * m, 9)?;
        w.collect_on_stream(t, dst.as_ptr(), src.as_ptr(), cnt(me), s)
            .map_err(|e| err("collect_on_stream", e))?;
        let want = (0..n)
            .flat_map(|j| (0..cnt(j)).map(move |i| (j, i)))
            .map(|(j, i)| input(wp(j), i, 9))
            .collect();
        self.check("collect_on_stream", dst, want)?;

        w.barrier_on_stream(t, s)
            .map_err(|e| err("barrier_on_stream", e))?;
        s.synchronize().map_err(|e| {
            fail(format!(
                "{}: synchronize: {e:?}",
                self.what("barrier_on_stream")
            ))
        })
    }
}
