//! `rshmem-mainerr`: a PE program whose `main` returns rshmem's error, as a new user's would
//! (`fn main() -> Result<(), rshmem::Error>` and `?`). PE 1 makes a bad call (a put to a PE
//! outside the job); the others wait in `barrier_all`, which fails when PE 1 is gone. The test
//! (`tests/faults.rs`) checks the order of what they print: PE 1's real error first, prefixed
//! with its PE, then the "dropped without finalize" warning and the peers' reports of its
//! departure.

fn main() -> Result<(), rshmem::Error> {
    rshmem::init_logging();
    let world = rshmem::init()?;
    let buf = world.malloc::<u64>(1)?;
    world.barrier_all()?;
    if world.my_pe() == 1 {
        world.p(buf.as_ptr(), 7, world.n_pes())?;
    }
    world.barrier_all()?;
    world.free(buf)?;
    world.finalize()
}
