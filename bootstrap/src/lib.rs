//! # rshmem-bootstrap
//!
//! Before a symmetric heap exists, the processes of an rshmem job (the *PEs*) need to learn who
//! they are and exchange a few bytes: addresses, file-descriptor socket names, tokens. This crate
//! does exactly that and nothing more:
//!
//! * [`LaunchInfo::from_env`] reads the launcher's variables (`rshmemrun`'s `RSHMEM_*`,
//!   torchrun's `RANK`/`WORLD_SIZE`/..., Open MPI's `OMPI_COMM_WORLD_*` / `PMIX_RANK`, Slurm's
//!   `SLURM_*`, PMI's `PMI_*`); a program started with no launcher is a single PE, like an MPI
//!   singleton, but variables of a launcher rshmem cannot join are an error.
//! * [`Bootstrap`] is the small set of collectives the runtime needs at start-up (allgather,
//!   alltoall, barrier, broadcast). [`TcpBootstrap`] implements it with a unique-id TCP rendezvous
//!   (rank 0 listens, the others connect; each side proves it knows the job's secret without
//!   sending it); [`SingletonBootstrap`]
//!   is the one-PE case. Under mpirun/srun/mpiexec with no `RSHMEM_BOOTSTRAP_ADDR` set (or with
//!   `RSHMEM_BOOTSTRAP=mpi`), [`from_env`] bootstraps through MPI: with the `mpi` feature,
//!   `MpiBootstrap` runs the collectives over `MPI_COMM_WORLD`; without it, the MPI library
//!   found at run time (`dlopen`/`dlsym`, no link) hands rank 0's rendezvous id to every rank
//!   and the TCP bootstrap runs ([`uid_over_comm`] does the same over a program's own
//!   communicator).
//! * The `rshmemrun` binary starts N PEs on this host.
//!
//! Every bootstrap operation is **collective**: all ranks must call it, in the same order.

mod env;
mod error;
#[cfg(feature = "mpi")]
mod mpi_bootstrap;
mod mpi_rt;
mod singleton;
mod tcp;
mod uid;

pub use env::{
    detect_launcher, from_env, from_env_lookup, launcher_rank, LaunchInfo, Launcher, ENV_VARS,
};
pub use error::{Error, Result};
#[cfg(feature = "mpi")]
pub use mpi_bootstrap::MpiBootstrap;
pub use mpi_rt::uid_over_comm;
pub use singleton::SingletonBootstrap;
pub use tcp::TcpBootstrap;
pub use uid::UniqueId;

pub use env::EnvVar;
pub use tcp::MAX_FRAME;
pub use uid::{secret_from_hex, secrets_equal, SECRET_LEN};

use std::time::Duration;

/// The collectives rshmem needs before (and beside) its own heap exists.
///
/// All methods are **collective** over the job's ranks: every rank calls the same methods in the
/// same order. Each call is bounded by the bootstrap's timeout (when [`Bootstrap::timeout`] is
/// `Some`) and fails with [`Error::Timeout`] naming the ranks that never arrived, or with
/// [`Error::PeerLost`] when a rank's connection dies. The MPI bootstrap has no timeout: its calls
/// block inside MPI, whose own failure handling applies.
pub trait Bootstrap: Send + Sync {
    /// This process's rank, `0..size()`.
    fn rank(&self) -> usize;
    /// Number of ranks in the job.
    fn size(&self) -> usize;
    /// Every rank contributes `mine` (lengths may differ between ranks); returns all
    /// contributions indexed by rank.
    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// `to_each[r]` is sent to rank `r` (`to_each.len() == size()`); returns what each rank sent
    /// to this one, indexed by sender.
    fn alltoall(&self, to_each: &[Vec<u8>]) -> Result<Vec<Vec<u8>>>;
    /// Returns once every rank has entered the barrier.
    fn barrier(&self) -> Result<()>;
    /// Rank `root`'s `data` is returned on every rank (`data` is ignored elsewhere).
    fn broadcast(&self, root: usize, data: &[u8]) -> Result<Vec<u8>>;
    /// The timeout applied to each blocking step (None: wait forever).
    fn timeout(&self) -> Option<Duration>;
}
