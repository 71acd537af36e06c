//! `transports` — which transport serves each PE and its capability bits: this PE and the PEs
//! of its host by load/store (`shm` on the CPU backend, `p2p` on GPUs: every capability), the
//! others by the remote transport named in the scenario's argument (`tcp` or `verbs`: RMA, AMO,
//! ordered; `ucx`: RMA, AMO, not ordered; never load/store); out-of-range PEs have none. Then one put and one atomic to every
//! PE through whichever transport serves it.

use rshmem::Caps;

use crate::check::{Context, Ctx, R};
use crate::ensure;

/// Runs the checks; `c.args[0]` is the expected remote transport (default `tcp`).
pub fn run(c: &Ctx<'_>) -> R {
    let w = c.w;
    let remote = c.args.first().map_or("tcp", String::as_str);
    let all = Caps::LOAD_STORE | Caps::RMA | Caps::AMO | Caps::ORDERED;
    for pe in 0..c.n {
        let info = w.transport(pe);
        ensure!(
            info.is_some(),
            "transport({pe}) is None for a PE of the job"
        );
        let info = info.unwrap_or(rshmem::TransportInfo {
            name: "",
            caps: Caps::NONE,
        });
        if w.node_pes().contains(&pe) {
            ensure!(
                matches!(info.name, "shm" | "p2p") && info.caps == all,
                "PE {pe} shares this host: expected shm/p2p with {all}, got {} with {}",
                info.name,
                info.caps
            );
        } else {
            // UCX does not order puts by itself (see transport/ucx/ucp.rs).
            let caps = match remote {
                "ucx" => Caps::RMA | Caps::AMO,
                _ => Caps::RMA | Caps::AMO | Caps::ORDERED,
            };
            ensure!(
                info.name == remote && info.caps == caps,
                "PE {pe} is on another host: expected {remote} with {caps}, got {} with {}",
                info.name,
                info.caps
            );
        }
    }
    ensure!(
        w.transport(c.n).is_none(),
        "transport(n_pes) should be None"
    );
    let cells = w.calloc::<u64>(c.n).ctx("calloc")?;
    let counter = w.calloc::<u64>(1).ctx("calloc")?;
    for pe in 0..c.n {
        w.p(cells.at(c.me), c.me as u64 + 1, pe).ctx("p")?;
        w.atomic_add(counter.as_ptr(), 1u64, pe).ctx("atomic_add")?;
    }
    w.barrier_all().ctx("barrier_all")?;
    for pe in 0..c.n {
        let v: u64 = w.g(cells.at(pe), c.me).ctx("g")?;
        ensure!(
            v == pe as u64 + 1,
            "cell {pe}: expected {}, got {v}",
            pe + 1
        );
    }
    let total: u64 = w.g(counter.as_ptr(), c.me).ctx("g")?;
    ensure!(
        total == c.n as u64,
        "counter: expected {}, got {total}",
        c.n
    );
    w.free(counter).ctx("free")?;
    w.free(cells).ctx("free")
}
