//! Every PE puts its number into the next PE's inbox; each prints what arrived.
fn main() -> rshmem::Result<()> {
    let world = rshmem::init()?; // collective: start and meet the other PEs
    let (me, n) = (world.my_pe(), world.n_pes());
    let inbox = world.calloc::<u64>(1)?; // collective: one zeroed u64 on every PE
    world.p(inbox.as_ptr(), me as u64, (me + 1) % n)?; // one-sided put into the next PE's copy
    world.barrier_all()?; // collective: every put is complete and visible
    println!("PE {me} of {n} got {}", inbox.read(0)?);
    world.free(inbox)?; // collective
    world.finalize() // collective
}
