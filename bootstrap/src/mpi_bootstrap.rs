//! The start-up collectives over MPI's `MPI_COMM_WORLD` (feature `mpi`).
//!
//! MPI is initialized once per process (`MPI_Init_thread`, asking for `MPI_THREAD_MULTIPLE`)
//! by the first [`MpiBootstrap::new`] and finalized when the process exits. When the
//! application initialized MPI itself, that MPI is used as it is and never finalized here.
//!
//! MPI calls block until every rank has arrived: the bootstrap's timeout does not apply inside
//! them ([`MpiBootstrap::timeout`] is `None`), and a rank that dies is handled by MPI (with its
//! default error handler, the launcher aborts the whole job).

use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use mpi::collective::{CommunicatorCollectives, Root, SystemOperation};
use mpi::datatype::{Partition, PartitionMut};
use mpi::environment::Threading;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::Count;

use crate::error::{Error, Result};
use crate::Bootstrap;

/// What this process learned when it set up MPI (once per process).
#[derive(Debug)]
struct MpiState {
    rank: usize,
    size: usize,
    local_rank: usize,
    local_size: usize,
    /// Whether this crate called `MPI_Init_thread` (and so finalizes MPI at exit).
    owned: bool,
}

/// The set-up result, shared by every [`MpiBootstrap`] of the process.
static STATE: OnceLock<std::result::Result<MpiState, String>> = OnceLock::new();

/// Serializes this crate's MPI calls (enough under `MPI_THREAD_SERIALIZED`).
static CALLS: Mutex<()> = Mutex::new(());

fn calls() -> MutexGuard<'static, ()> {
    CALLS.lock().unwrap_or_else(|e| e.into_inner())
}

extern "C" fn finalize_at_exit() {
    if !mpi::environment::is_finalized() {
        // SAFETY: MPI was initialized by this crate (the handler is registered only then) and
        // is not finalized yet; no other thread of this crate calls MPI during exit handlers.
        unsafe {
            mpi::ffi::MPI_Finalize();
        }
    }
}

fn set_up() -> std::result::Result<MpiState, String> {
    let _guard = calls();
    if mpi::environment::is_finalized() {
        return Err(
            "MPI has already been finalized in this process, so the MPI bootstrap \
                    cannot start; use the TCP bootstrap (RSHMEM_BOOTSTRAP=tcp and \
                    RSHMEM_BOOTSTRAP_ADDR)"
                .into(),
        );
    }
    let owned = match mpi::initialize_with_threading(Threading::Multiple) {
        Some((universe, _)) => {
            // Dropping the universe would finalize MPI now; finalize at exit instead, so that
            // rshmem can be initialized again after `finalize` and the application may use
            // MPI until it exits.
            std::mem::forget(universe);
            // SAFETY: registers a plain `extern "C"` function without captured state.
            if unsafe { libc::atexit(finalize_at_exit) } != 0 {
                tracing::warn!("bootstrap: could not register MPI_Finalize to run at exit");
            }
            true
        }
        // The application initialized MPI: use it, leave finalizing to it.
        None => false,
    };
    let threading = mpi::environment::threading_support();
    if matches!(threading, Threading::Single | Threading::Funneled) {
        tracing::warn!(
            ?threading,
            "bootstrap: MPI provides less than MPI_THREAD_SERIALIZED; call rshmem's collectives \
             from the thread that initialized MPI"
        );
    }
    let world = SimpleCommunicator::world();
    let shared = world.split_shared(world.rank());
    Ok(MpiState {
        rank: count_to_usize(world.rank()),
        size: count_to_usize(world.size()),
        local_rank: count_to_usize(shared.rank()),
        local_size: count_to_usize(shared.size()),
        owned,
    })
}

fn count_to_usize(c: Count) -> usize {
    usize::try_from(c).unwrap_or(0)
}

/// Counts and displacements (in bytes) of a concatenation of pieces of length `lens`; `None`
/// when the total does not fit an MPI count.
fn layout(lens: &[u64]) -> Option<(Vec<Count>, Vec<Count>)> {
    let mut counts = Vec::with_capacity(lens.len());
    let mut displs = Vec::with_capacity(lens.len());
    let mut at: Count = 0;
    for &l in lens {
        let c = Count::try_from(l).ok()?;
        displs.push(at);
        counts.push(c);
        at = at.checked_add(c)?;
    }
    Some((counts, displs))
}

/// Splits `buf` into the pieces described by `lens` (which `layout` accepted).
fn split(buf: &[u8], lens: &[u64]) -> Vec<Vec<u8>> {
    let mut out = Vec::with_capacity(lens.len());
    let mut at = 0usize;
    for &l in lens {
        let l = l as usize;
        out.push(buf[at..at + l].to_vec());
        at += l;
    }
    out
}

/// A zeroed buffer of `len` bytes whose pointer is a real allocation even when `len` is 0: an
/// empty `Vec`'s dangling pointer is `0x1`, which Open MPI reads as `MPI_IN_PLACE`.
fn buffer(len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len.max(1));
    v.resize(len, 0);
    v
}

/// `data` copied into a [`buffer`] (see there).
fn buffer_from(data: &[u8]) -> Vec<u8> {
    let mut v = buffer(0);
    v.extend_from_slice(data);
    v
}

fn too_large(op: &str) -> Error {
    Error::InvalidArgument(format!(
        "MPI bootstrap {op}: the data exceeds MPI's count limit ({} bytes)",
        Count::MAX
    ))
}

/// [`Bootstrap`] over `MPI_COMM_WORLD`: rank and size are MPI's, and every collective is an MPI
/// collective (allgather and alltoall exchange the lengths first, then the bytes with
/// `MPI_Allgatherv` / `MPI_Alltoallv`).
///
/// Every operation blocks until all ranks have arrived: [`Bootstrap::timeout`] is `None`, and
/// failures (a rank that dies, a broken network) are handled by MPI, which with its default
/// error handler aborts the job.
#[derive(Debug)]
pub struct MpiBootstrap {
    rank: usize,
    size: usize,
    local_rank: usize,
    local_size: usize,
}

impl MpiBootstrap {
    /// Joins `MPI_COMM_WORLD`, initializing MPI when the application has not (the first call
    /// in the process does; later calls reuse it). Not collective by itself when MPI is
    /// already initialized; `MPI_Init_thread` is.
    pub fn new() -> Result<Self> {
        let st = STATE
            .get_or_init(set_up)
            .as_ref()
            .map_err(|m| Error::Config(m.clone()))?;
        if mpi::environment::is_finalized() {
            return Err(Error::Config(
                "MPI was finalized by the application; the MPI bootstrap cannot run".into(),
            ));
        }
        tracing::debug!(
            rank = st.rank,
            size = st.size,
            owned = st.owned,
            "bootstrap: MPI_COMM_WORLD"
        );
        Ok(MpiBootstrap {
            rank: st.rank,
            size: st.size,
            local_rank: st.local_rank,
            local_size: st.local_size,
        })
    }

    /// This rank among the ranks on its host (`MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`).
    pub fn local_rank(&self) -> usize {
        self.local_rank
    }

    /// Number of ranks on this host.
    pub fn local_size(&self) -> usize {
        self.local_size
    }

    /// Whether this crate initialized MPI (and finalizes it at process exit) rather than the
    /// application.
    pub fn initialized_mpi(&self) -> bool {
        matches!(STATE.get(), Some(Ok(st)) if st.owned)
    }

    /// Fails when some rank's `bad` is true, on every rank alike (one `MPI_Allreduce`).
    fn agree(&self, world: &SimpleCommunicator, op: &str, bad: bool) -> Result<()> {
        let mine = u8::from(bad);
        let mut any = 0u8;
        world.all_reduce_into(&mine, &mut any, SystemOperation::max());
        if any != 0 {
            return Err(too_large(op));
        }
        Ok(())
    }
}

impl Bootstrap for MpiBootstrap {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let _guard = calls();
        let world = SimpleCommunicator::world();
        let len = mine.len() as u64;
        let mut lens = vec![0u64; self.size];
        world.all_gather_into(&len, &mut lens[..]);
        // Every rank sees the same lengths, so every rank takes the same branch.
        let (counts, displs) = layout(&lens).ok_or_else(|| too_large("allgather"))?;
        let total: usize = lens.iter().map(|&l| l as usize).sum();
        let mut buf = buffer(total);
        let send = buffer_from(mine);
        {
            let mut part = PartitionMut::new(&mut buf[..], &counts[..], &displs[..]);
            world.all_gather_varcount_into(&send[..], &mut part);
        }
        Ok(split(&buf, &lens))
    }

    fn alltoall(&self, to_each: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
        if to_each.len() != self.size {
            return Err(Error::InvalidArgument(format!(
                "alltoall: {} buffers for {} ranks",
                to_each.len(),
                self.size
            )));
        }
        let _guard = calls();
        let world = SimpleCommunicator::world();
        let send_lens: Vec<u64> = to_each.iter().map(|v| v.len() as u64).collect();
        let mut recv_lens = vec![0u64; self.size];
        world.all_to_all_into(&send_lens[..], &mut recv_lens[..]);
        let send = layout(&send_lens);
        let recv = layout(&recv_lens);
        self.agree(&world, "alltoall", send.is_none() || recv.is_none())?;
        let ((scounts, sdispls), (rcounts, rdispls)) = match (send, recv) {
            (Some(s), Some(r)) => (s, r),
            _ => return Err(too_large("alltoall")),
        };
        let sendbuf = buffer_from(&to_each.concat());
        let total: usize = recv_lens.iter().map(|&l| l as usize).sum();
        let mut recvbuf = buffer(total);
        {
            let spart = Partition::new(&sendbuf[..], &scounts[..], &sdispls[..]);
            let mut rpart = PartitionMut::new(&mut recvbuf[..], &rcounts[..], &rdispls[..]);
            world.all_to_all_varcount_into(&spart, &mut rpart);
        }
        Ok(split(&recvbuf, &recv_lens))
    }

    fn barrier(&self) -> Result<()> {
        let _guard = calls();
        SimpleCommunicator::world().barrier();
        Ok(())
    }

    fn broadcast(&self, root: usize, data: &[u8]) -> Result<Vec<u8>> {
        if root >= self.size {
            return Err(Error::InvalidArgument(format!(
                "broadcast: root {root} is not below the job size {}",
                self.size
            )));
        }
        let _guard = calls();
        let world = SimpleCommunicator::world();
        let root_process = world.process_at_rank(root as Count);
        let mut len: u64 = if self.rank == root {
            data.len() as u64
        } else {
            0
        };
        root_process.broadcast_into(&mut len);
        // Every rank sees the same length, so every rank takes the same branch.
        let n = Count::try_from(len).map_err(|_| too_large("broadcast"))?;
        let mut buf = if self.rank == root {
            buffer_from(data)
        } else {
            buffer(n as usize)
        };
        root_process.broadcast_into(&mut buf[..]);
        Ok(buf)
    }

    /// Always `None`: MPI calls block until every rank arrives; MPI's own failure handling
    /// applies instead of a timeout.
    fn timeout(&self) -> Option<Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_and_split() {
        let lens = [3u64, 0, 2];
        let (c, d) = layout(&lens).unwrap();
        assert_eq!((c, d), (vec![3, 0, 2], vec![0, 3, 3]));
        let parts = split(b"abcde", &lens);
        assert_eq!(parts, vec![b"abc".to_vec(), vec![], b"de".to_vec()]);
        assert!(layout(&[Count::MAX as u64, 1]).is_none());
        assert!(layout(&[u64::MAX]).is_none());
        // Never the dangling pointer 0x1 (MPI_IN_PLACE in Open MPI).
        let (empty, copied) = (buffer(0), buffer_from(&[]));
        assert_ne!(empty.as_ptr() as usize, 1);
        assert_ne!(copied.as_ptr() as usize, 1);
        assert_eq!(buffer_from(b"ab"), b"ab");
    }
}
