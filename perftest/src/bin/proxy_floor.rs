//! proxy_floor: the floors under a device put + quiet through the proxy, measured one by one on
//! one GPU and this host, so the proxy's own overhead can be told apart from the hardware's.
//!
//! * `ring`: one GPU thread stores a counter to host-mapped pinned memory, a host thread sees
//!   it and answers in a second word, the GPU thread waits for the answer (the proxy ring's
//!   bare round trip), once with the host thread and the memory on each NUMA node.
//! * `gpu write`: a host thread makes 8 bytes visible in GPU memory and waits for it:
//!   `cuStreamWriteValue64` + `cuStreamSynchronize` / + spinning on `cuStreamQuery`,
//!   `cuMemcpyHtoDAsync` from pinned and from pageable memory + synchronize, and an empty
//!   one-thread kernel + synchronize (how the proxy applies atomics).
//! * `tcp`: a 40-byte request and a 16-byte reply between two threads over loopback TCP
//!   (`TCP_NODELAY`), both busy-polling non-blocking sockets (the TCP transport's flush).
//! * `shm`: the same round trip through a cache line of shared memory (reference).
//!
//! Run: `target/release/proxy_floor [--json] [--iters N]` (one PE, GPU backend; `--help` lists
//! the options every perftest takes).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rshmem::cudarc::driver::{sys, LaunchConfig, PushKernelArg};
use rshmem::Error;
use rshmem_perftest::output::json_f64;
use rshmem_perftest::{cli, out, Kind, NoExtra, Options, RunInfo, Spec};

const KERNEL: &str = r#"
// mode 0: the flag alone (st.release.sys); 1: seven more words of the line first (relaxed), then
// the flag (release), as the proxy publishes a request; 2: as 1 after an atomic on a device
// word (the proxy's ticket); 3: all eight words relaxed with no fence (the host checks each).
extern "C" __global__ void ring_echo(int mode, unsigned long long* to_host,
                                     unsigned long long* from_host, int iters,
                                     unsigned long long* dev_word, unsigned long long* out_ns) {
    unsigned long long t0, t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (int i = 1; i <= iters; ++i) {
        unsigned long long v = (unsigned long long)i;
        if (mode == 2) v += 0 * atomicAdd(dev_word, 1ull);
        if (mode != 0) {
            for (int w = 1; w < 8; ++w) {
                asm volatile("st.relaxed.sys.global.u64 [%0], %1;" :: "l"(to_host + w), "l"(v) : "memory");
            }
        }
        if (mode == 3) {
            asm volatile("st.relaxed.sys.global.u64 [%0], %1;" :: "l"(to_host), "l"(v) : "memory");
        } else {
            asm volatile("st.release.sys.global.u64 [%0], %1;" :: "l"(to_host), "l"(v) : "memory");
        }
        unsigned long long r;
        do {
            asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(r) : "l"(from_host) : "memory");
        } while (r != (unsigned long long)i);
    }
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    out_ns[0] = t1 - t0;
}
extern "C" __global__ void empty_kernel(unsigned long long* p) { if (p == 0) p[0] = 0; }
"#;

fn cu(r: sys::CUresult, what: &str) -> rshmem::Result<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cuda {
            call: "proxy_floor",
            what: what.to_string(),
            code: format!("{r:?}"),
        })
    }
}

/// Maps a cudarc error to the perftest's error, naming what failed.
fn drv(what: &'static str) -> impl Fn(rshmem::cudarc::driver::DriverError) -> Error {
    move |e| Error::Cuda {
        call: "proxy_floor",
        what: what.to_string(),
        code: format!("{e:?}"),
    }
}

/// One thread.
const ONE: LaunchConfig = LaunchConfig {
    grid_dim: (1, 1, 1),
    block_dim: (1, 1, 1),
    shared_mem_bytes: 0,
};

fn io(what: &str, e: std::io::Error) -> Error {
    Error::InvalidArgument {
        call: "proxy_floor",
        reason: format!("{what}: {e}"),
    }
}

fn report(json: Option<&RunInfo>, part: &str, what: &str, samples: &mut [f64]) {
    samples.sort_by(|a, b| a.total_cmp(b));
    let med = samples[samples.len() / 2];
    let p10 = samples[samples.len() / 10];
    let p90 = samples[samples.len() * 9 / 10];
    let r3 = |v: f64| json_f64((v * 1e3).round() / 1e3);
    match json {
        Some(info) => out(&info.line(serde_json::json!({
            "bench": "proxy_floor",
            "part": part,
            "op": what,
            "us_median": r3(med),
            "us_p10": r3(p10),
            "us_p90": r3(p90),
        }))),
        None => out(&format!(
            "{part:<10} {what:<58} {med:>8.3} {p10:>8.3} {p90:>8.3}"
        )),
    }
}

/// CPUs of each NUMA node (from sysfs); one entry with every CPU when there is no NUMA info.
fn numa_nodes() -> Vec<(i32, Vec<usize>)> {
    let mut out = Vec::new();
    for node in 0..64 {
        let Ok(list) =
            std::fs::read_to_string(format!("/sys/devices/system/node/node{node}/cpulist"))
        else {
            continue;
        };
        let cpus = parse_cpulist(&list);
        if !cpus.is_empty() {
            out.push((node, cpus));
        }
    }
    out
}

fn parse_cpulist(s: &str) -> Vec<usize> {
    let mut v = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    v.extend(a..=b);
                }
            }
            None => v.extend(part.parse::<usize>().ok()),
        }
    }
    v
}

/// Pins the calling thread to `cpus` (ignored when that fails).
fn pin(cpus: &[usize]) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET writes inside it; the call reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn gpu_numa_node(ordinal: usize) -> Option<i32> {
    let mut id = [0i8; 32];
    let mut dev: sys::CUdevice = 0;
    // SAFETY: valid out-pointers of the stated sizes.
    unsafe {
        if sys::cuDeviceGet(&mut dev, ordinal as i32) != sys::CUresult::CUDA_SUCCESS
            || sys::cuDeviceGetPCIBusId(id.as_mut_ptr(), 32, dev) != sys::CUresult::CUDA_SUCCESS
        {
            return None;
        }
    }
    let s: String = id
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| (c as u8 as char).to_ascii_lowercase())
        .collect();
    std::fs::read_to_string(format!("/sys/bus/pci/devices/{s}/numa_node"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

struct Host {
    p: *mut u64,
}

impl Host {
    fn new(len: usize) -> rshmem::Result<Host> {
        let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: valid out-pointer; the context is current on this thread.
        let r = unsafe { sys::cuMemHostAlloc(&mut p, len, flags) };
        cu(r, "cuMemHostAlloc")?;
        // SAFETY: len fresh bytes (first touch by this thread places them).
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, len) };
        Ok(Host { p: p.cast() })
    }
    fn word(&self, i: usize) -> &AtomicU64 {
        // SAFETY: an aligned word inside the allocation, alive as long as self.
        unsafe { &*(self.p.add(i) as *const AtomicU64) }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc, freed once.
        unsafe { sys::cuMemFreeHost(self.p.cast()) };
    }
}

const SPEC: Spec = Spec {
    name: "proxy_floor",
    about: "the floors under a device put + quiet through the proxy (ring, GPU write, TCP, shm round trips), one PE",
    kind: Kind::Fixed { iters: 5000 },
    min_pes: 1,
};

fn run(opts: &Options) -> rshmem::Result<()> {
    let iters = opts.iters.unwrap_or(5000);
    let world = rshmem::init()?;
    let Some(gpu) = world.gpu() else {
        out("proxy_floor: no GPU backend, nothing to measure (SKIPPED)");
        return world.finalize();
    };
    let info = opts.json.then(|| RunInfo::new(&world, opts));
    let json = info.as_ref();
    let module = world.load_module(KERNEL)?;
    let echo = module.function("ring_echo")?;
    let empty = module.function("empty_kernel")?;
    let stream = gpu.ctx.new_stream().map_err(drv("stream"))?;
    let node = gpu_numa_node(gpu.ordinal);
    if json.is_none() {
        out(&format!(
            "# proxy_floor: GPU {} (NUMA node {node:?}), {iters} round trips per row; median, p10, p90 in us",
            gpu.ordinal
        ));
    }
    let dev_buf = world.calloc::<u64>(64)?;
    let out = world.calloc::<u64>(1)?;

    // Ring round trip per NUMA node of the host thread and the memory.
    let mut nodes: Vec<(String, Vec<usize>)> = numa_nodes()
        .into_iter()
        .map(|(n, c)| (format!("node {n}"), c))
        .collect();
    if nodes.is_empty() {
        nodes.push(("any cpu".into(), Vec::new()));
    }
    let rounds = 5usize;
    let modes: [(i32, &str); 4] = [
        (0, "flag only"),
        (1, "7 words + release flag (the proxy's publish)"),
        (2, "device atomic + 7 words + release flag"),
        (3, "8 tagged words, no fence"),
    ];
    for ((name, cpus), &(mode, what)) in
        nodes.iter().flat_map(|n| modes.iter().map(move |m| (n, m)))
    {
        let mut samples = Vec::new();
        for _ in 0..rounds {
            let cpus2 = cpus.clone();
            let ctx = gpu.ctx.clone();
            let (tx, rx) = std::sync::mpsc::channel::<rshmem::Result<(usize, usize)>>();
            let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
            let n = iters;
            let echoer = std::thread::spawn(move || -> rshmem::Result<()> {
                if !cpus2.is_empty() {
                    pin(&cpus2[..1]);
                }
                ctx.bind_to_thread().map_err(drv("bind"))?;
                let h = Host::new(4096)?;
                tx.send(Ok((h.p as usize, h.p as usize + 64))).ok();
                let _ = go_rx.recv();
                let mut sink = 0u64;
                for i in 1..=n as u64 {
                    if mode == 3 {
                        while (0..8).any(|w| h.word(w).load(Ordering::Acquire) != i) {
                            std::hint::spin_loop();
                        }
                    } else {
                        while h.word(0).load(Ordering::Acquire) != i {
                            std::hint::spin_loop();
                        }
                        sink = (1..8).fold(sink, |a, w| a ^ h.word(w).load(Ordering::Relaxed));
                    }
                    h.word(8).store(i, Ordering::Release);
                }
                std::hint::black_box(sink);
                // Wait until the kernel is done before the memory goes.
                let _ = go_rx.recv();
                Ok(())
            });
            let (to_host, from_host) = rx.recv().map_err(|_| Error::State {
                call: "proxy_floor",
                reason: "echo thread died".into(),
            })??;
            let (th, fh, o, it) = (
                to_host as u64,
                from_host as u64,
                out.as_ptr() as u64,
                n as i32,
            );
            let dw = dev_buf.as_ptr() as u64 + 256;
            go_tx.send(()).ok();
            // SAFETY: ring_echo(int, u64*, u64*, int, u64*, u64*) with host-mapped pinned words
            // (UVA) and live device words.
            unsafe {
                stream
                    .launch_builder(&echo)
                    .arg(&mode)
                    .arg(&th)
                    .arg(&fh)
                    .arg(&it)
                    .arg(&dw)
                    .arg(&o)
                    .launch(ONE)
            }
            .map_err(drv("launch"))?;
            stream.synchronize().map_err(drv("sync"))?;
            go_tx.send(()).ok();
            echoer.join().map_err(|_| Error::State {
                call: "proxy_floor",
                reason: "echo thread panicked".into(),
            })??;
            let ns = out.read(0).unwrap_or(0);
            samples.push(ns as f64 / 1e3 / n as f64);
        }
        let local = match node {
            Some(g) if name == &format!("node {g}") => " (the GPU's node)",
            _ => "",
        };
        report(
            json,
            "ring",
            &format!("{what}, host on {name}{local}"),
            &mut samples,
        );
    }

    // GPU writes from a host thread (this thread, on the GPU's node when known).
    if let Some(g) = node {
        if let Some((_, cpus)) = numa_nodes().into_iter().find(|(n, _)| *n == g) {
            pin(&cpus[..1]);
        }
    }
    gpu.bind("proxy_floor")?;
    let s = stream.cu_stream();
    let dst = dev_buf.as_ptr() as u64;
    let pinned = Host::new(4096)?;
    let mut pageable = [0u8; 64];
    let time = |f: &mut dyn FnMut(u64) -> rshmem::Result<()>| -> rshmem::Result<Vec<f64>> {
        for i in 0..100 {
            f(i)?;
        }
        let mut v = Vec::with_capacity(iters);
        for i in 0..iters as u64 {
            let t = Instant::now();
            f(i)?;
            v.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Ok(v)
    };
    let sync = |s: sys::CUstream| -> rshmem::Result<()> {
        // SAFETY: a live stream of the current context.
        let r = unsafe { sys::cuStreamSynchronize(s) };
        cu(r, "cuStreamSynchronize")
    };
    let mut v = time(&mut |i| {
        // SAFETY: dst is an aligned word of live GPU memory.
        let r = unsafe { sys::cuStreamWriteValue64_v2(s, dst, i, 0) };
        cu(r, "cuStreamWriteValue64")?;
        sync(s)
    })?;
    report(
        json,
        "gpu write",
        "cuStreamWriteValue64 + cuStreamSynchronize",
        &mut v,
    );
    let mut v = time(&mut |i| {
        // SAFETY: as above.
        let r = unsafe { sys::cuStreamWriteValue64_v2(s, dst, i, 0) };
        cu(r, "cuStreamWriteValue64")?;
        loop {
            // SAFETY: a live stream.
            match unsafe { sys::cuStreamQuery(s) } {
                sys::CUresult::CUDA_SUCCESS => return Ok(()),
                sys::CUresult::CUDA_ERROR_NOT_READY => std::hint::spin_loop(),
                e => return cu(e, "cuStreamQuery"),
            }
        }
    })?;
    report(
        json,
        "gpu write",
        "cuStreamWriteValue64 + spin on cuStreamQuery",
        &mut v,
    );
    for (kind, from) in [
        ("pinned", pinned.p.cast::<u8>()),
        ("pageable", pageable.as_mut_ptr()),
    ] {
        let mut v = time(&mut |i| {
            // SAFETY: `from` points to at least 8 writable bytes (aligned for the pinned buffer,
            // maybe not for the array), alive for the loop.
            unsafe { std::ptr::write_unaligned(from.cast::<u64>(), i) };
            // SAFETY: 8 host bytes to an aligned word of GPU memory (pageable ones are staged by
            // the driver before the call returns).
            let r = unsafe { sys::cuMemcpyHtoDAsync_v2(dst, from.cast(), 8, s) };
            cu(r, "cuMemcpyHtoDAsync")?;
            sync(s)
        })?;
        report(
            json,
            "gpu write",
            &format!("cuMemcpyHtoDAsync 8 B from {kind} + sync"),
            &mut v,
        );
    }
    let mut v = time(&mut |_| {
        let p = 1u64;
        // SAFETY: empty_kernel(u64*) never dereferences a non-null pointer.
        unsafe { stream.launch_builder(&empty).arg(&p).launch(ONE) }.map_err(drv("launch"))?;
        sync(s)
    })?;
    report(json, "gpu write", "one-thread kernel launch + sync", &mut v);
    let mut v = time(&mut |_| {
        // SAFETY: 8 bytes of GPU memory to pinned memory.
        let r = unsafe { sys::cuMemcpyDtoHAsync_v2(pinned.p.cast(), dst, 8, s) };
        cu(r, "cuMemcpyDtoHAsync")?;
        sync(s)
    })?;
    report(
        json,
        "gpu read",
        "cuMemcpyDtoHAsync 8 B to pinned + sync",
        &mut v,
    );

    // TCP loopback round trip between two busy-polling threads.
    let cpus: Vec<usize> = node
        .and_then(|g| numa_nodes().into_iter().find(|(n, _)| *n == g))
        .map(|(_, c)| c)
        .unwrap_or_default();
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| io("bind", e))?;
    let addr = l.local_addr().map_err(|e| io("addr", e))?;
    let n = iters;
    let c2 = cpus.clone();
    let server = std::thread::spawn(move || -> std::io::Result<()> {
        if c2.len() > 1 {
            pin(&c2[1..2]);
        }
        let (mut s, _) = l.accept()?;
        s.set_nodelay(true)?;
        s.set_nonblocking(true)?;
        let mut req = [0u8; 40];
        for _ in 0..n + 100 {
            read_spin(&mut s, &mut req)?;
            write_spin(&mut s, &[1u8; 16])?;
        }
        Ok(())
    });
    if !cpus.is_empty() {
        pin(&cpus[..1]);
    }
    let mut c = TcpStream::connect(addr).map_err(|e| io("connect", e))?;
    c.set_nodelay(true).map_err(|e| io("nodelay", e))?;
    c.set_nonblocking(true).map_err(|e| io("nonblocking", e))?;
    let mut rep = [0u8; 16];
    let mut v = Vec::with_capacity(iters);
    for i in 0..n + 100 {
        let t = Instant::now();
        write_spin(&mut c, &[2u8; 40]).map_err(|e| io("send", e))?;
        read_spin(&mut c, &mut rep).map_err(|e| io("recv", e))?;
        if i >= 100 {
            v.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    server
        .join()
        .map_err(|_| Error::State {
            call: "proxy_floor",
            reason: "tcp thread panicked".into(),
        })?
        .map_err(|e| io("server", e))?;
    report(
        json,
        "tcp",
        "40 B request + 16 B reply, loopback, both busy-polling",
        &mut v,
    );

    // Shared-memory round trip between two threads (reference).
    let line = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let l2 = line.clone();
    let c2 = cpus.clone();
    let t = std::thread::spawn(move || {
        if c2.len() > 1 {
            pin(&c2[1..2]);
        }
        for i in 1..=(n + 100) as u64 {
            while l2[0].load(Ordering::Acquire) != i {
                std::hint::spin_loop();
            }
            l2[1].store(i, Ordering::Release);
        }
    });
    let mut v = Vec::with_capacity(iters);
    for i in 1..=(n + 100) as u64 {
        let t0 = Instant::now();
        line[0].store(i, Ordering::Release);
        while line[1].load(Ordering::Acquire) != i {
            std::hint::spin_loop();
        }
        if i > 100 {
            v.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    t.join().ok();
    report(
        json,
        "shm",
        "two threads through shared memory (reference)",
        &mut v,
    );

    world.free(out)?;
    world.free(dev_buf)?;
    world.finalize()
}

fn read_spin(s: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match s.read(&mut buf[done..]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(k) => done += k,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn write_spin(s: &mut TcpStream, buf: &[u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match s.write(&buf[done..]) {
            Ok(k) => done += k,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let (opts, NoExtra {}) = cli::parse::<NoExtra>(&SPEC);
    rshmem::init_logging();
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("proxy_floor: {e}");
            ExitCode::FAILURE
        }
    }
}
