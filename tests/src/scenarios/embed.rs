//! `embed RANK SIZE UNIQUE_ID [BACKEND]` — started with no launcher variables at all: the PE joins the
//! job through `Builder::rank/size/unique_id` (as a framework that knows its ranks would), then
//! checks the job it got (rank, size) and moves data around a ring through buffers owned by a
//! struct together with the world (`World::into_shared` + `SharedSymBuf`), frees them
//! collectively and finalizes with `World::finalize_shared`.

use std::sync::Arc;

use rshmem::config::BackendChoice;
use rshmem::{Builder, Cmp, SharedSymBuf, SignalOp, World};

use crate::check::{Fail, R};
use crate::ensure;

/// What a framework would keep: the world and its buffers in one struct, no lifetimes.
struct Comm {
    data: SharedSymBuf<u64>,
    sig: SharedSymBuf<u64>,
    world: Arc<World>,
}

/// Parses the arguments, joins the job and runs the checks; returns this PE's rank.
pub fn run(args: &[String]) -> R<usize> {
    let (rank, size, uid, backend) = match args {
        [r, s, u] => (r, s, u, None),
        [r, s, u, b] => (r, s, u, Some(b.as_str())),
        _ => {
            return Err(Fail(format!(
                "usage: embed RANK SIZE UNIQUE_ID [cpu|gpu|auto] (got {} arguments)",
                args.len()
            )))
        }
    };
    let rank: usize = rank
        .parse()
        .map_err(|_| Fail(format!("bad rank {rank:?}")))?;
    let size: usize = size
        .parse()
        .map_err(|_| Fail(format!("bad size {size:?}")))?;
    let uid: rshmem::UniqueId = uid
        .parse()
        .map_err(|e| Fail(format!("bad unique id: {e}")))?;
    let mut b = Builder::new();
    if let Some(name) = backend {
        b = b.backend(match name {
            "cpu" => BackendChoice::Cpu,
            "gpu" => BackendChoice::Gpu,
            "auto" => BackendChoice::Auto,
            _ => return Err(Fail(format!("bad backend {name:?}"))),
        });
    }
    let world = b
        .rank(rank)
        .size(size)
        .unique_id(uid)
        .timeout(Some(std::time::Duration::from_secs(30)))
        .init()
        .map_err(|e| Fail(format!("Builder::init as rank {rank} of {size}: {e}")))?;
    ensure!(
        world.my_pe() == rank && world.n_pes() == size,
        "joined as PE {} of {}, asked for rank {rank} of {size}",
        world.my_pe(),
        world.n_pes()
    );
    let world = world.into_shared();
    let comm = Comm {
        data: world.calloc_shared(4)?,
        sig: world.calloc_shared(1)?,
        world,
    };
    let (me, n) = (rank, size);
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    let payload = [me as u64 * 100, me as u64 * 100 + 1, 7, 8];
    comm.world.put_signal(
        comm.data.as_ptr(),
        &payload,
        comm.sig.as_ptr(),
        1,
        SignalOp::Set,
        next,
    )?;
    comm.world
        .signal_wait_until(comm.sig.as_ptr(), Cmp::Eq, 1)?;
    let got = comm.data.to_vec()?;
    let want = [prev as u64 * 100, prev as u64 * 100 + 1, 7, 8];
    ensure!(
        got == want,
        "from PE {prev}: expected {want:?}, got {got:?}"
    );
    comm.world.barrier_all()?;
    let Comm { data, sig, world } = comm;
    data.free()?;
    sig.free()?;
    World::finalize_shared(world).map_err(|e| Fail(format!("finalize_shared: {e}")))?;
    Ok(rank)
}
