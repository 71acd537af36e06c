//! # rshmem
//!
//! A symmetric-memory PGAS runtime in the style of NVSHMEM and OpenSHMEM.
//!
//! ## Glossary
//! * **PE** (processing element) — one process of the job; [`World::my_pe`], [`World::n_pes`].
//! * **symmetric heap** — memory every PE allocates together ([`World::malloc`]); an object has
//!   a copy on every PE at the same offset, so this PE's address of it names the copy on any PE.
//! * **symmetric region** — memory of a process's own (outside the heap) that every PE
//!   registered with [`World::register_region`]; its addresses work wherever heap addresses do,
//!   for PEs whose copy is reachable by load/store (see [`region`]).
//! * **one-sided** — only the calling PE takes part (put, get, atomics, signals).
//! * **collective** — every PE must make the call, in the same order (init, allocation,
//!   barrier, finalize).
//! * **transport** — how bytes reach a PE. This build has `shm`: load/store through memory
//!   shared between the processes of one host.
//!
//! ## A tour
//! ```no_run
//! # fn main() -> rshmem::Result<()> {
//! let world = rshmem::init()?;                      // collective
//! let (me, n) = (world.my_pe(), world.n_pes());
//! let inbox = world.calloc::<i32>(1)?;              // collective, symmetric
//! world.p(inbox.as_ptr(), me as i32, (me + 1) % n)?; // one-sided put of one element
//! world.barrier_all()?;                             // collective: puts complete, all arrive
//! assert_eq!(inbox.read(0)?, ((me + n - 1) % n) as i32);
//! world.free(inbox)?;
//! world.finalize()
//! # }
//! ```
//!
//! Every call checks its arguments (PE range, symmetric address ranges, alignment) and returns
//! an [`Error`] naming the call and the cause, writing nothing. Blocking calls are bounded by
//! `RSHMEM_TIMEOUT` and fail with an error naming the PE when a peer is gone; `SIGUSR1` makes a
//! PE report what it is blocked in (see docs/launching.md, "Hang reports").
//!
//! ## Embedding
//! A framework that has its own ranks starts rshmem with [`Builder::rank`], [`Builder::size`]
//! and [`Builder::unique_id`] (no launcher variables needed), and keeps the world and its
//! buffers in one struct with [`World::into_shared`] and [`SharedSymBuf`] (see [`shared`]).

/// Declares public [`World`] calls that share one parameter list and are each one call of a
/// private implementation taking the call's name first: the shared generics, parameters (after
/// `&self`) and result, then one row a call: its docs, its name, and the implementation with
/// the arguments that follow the name.
macro_rules! calls {
    ($gen:tt $params:tt -> $ret:ty; $($(#[$doc:meta])* $name:ident => $imp:ident $args:tt;)+) => {
        $(calls!(@one $gen $params $ret; $(#[$doc])* $name $imp $args);)+
    };
    (@one [$($gen:tt)*] ($($p:tt)*) $ret:ty; $(#[$doc:meta])* $name:ident $imp:ident ($($a:tt)*)) => {
        $(#[$doc])*
        pub fn $name<$($gen)*>(&self, $($p)*) -> $ret {
            self.$imp(stringify!($name), $($a)*)
        }
    };
}

/// `impl Debug` for a type that shows only the fields listed (the others are handles, locks
/// or buffers with nothing useful to print, or too large): `debug_fields!(Type, |s| { name:
/// expr, ... })` prints `Type { name: expr, .. }` with `s` bound to `&self`.
macro_rules! debug_fields {
    ($t:ident $(<$lt:lifetime>)?, |$s:ident| { $($name:ident: $e:expr),+ $(,)? }) => {
        impl std::fmt::Debug for $t $(<$lt>)? {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let $s = self;
                f.debug_struct(stringify!($t))
                    $(.field(stringify!($name), &$e))+
                    .finish()
            }
        }
    };
}
pub(crate) use debug_fields;

#[cfg(test)]
mod debug_fields_tests {
    struct Shown<'a> {
        n: u32,
        hidden: &'a [u8],
    }

    debug_fields!(Shown<'_>, |s| { n: s.n, len: s.hidden.len() });

    #[test]
    fn shows_only_the_listed_fields_under_the_type_name() {
        let v = Shown {
            n: 7,
            hidden: &[1, 2, 3],
        };
        assert_eq!(format!("{v:?}"), "Shown { n: 7, len: 3 }");
    }
}

mod amo;
mod cloexec;
mod coll;
pub mod config;
pub mod contract;
pub mod cuda;
mod cuda_interop;
pub mod device;
pub mod ep;
mod error;
pub mod exit;
mod float16;
mod frame;
mod hang;
pub(crate) mod heap;
mod mem;
pub(crate) mod node;
pub(crate) mod proxy;
pub mod region;
mod rma;
mod seqlock;
pub mod shared;
mod signal;
mod stream;
mod sync;
mod team;
pub(crate) mod transport;
mod types;
mod uid;
mod userbuf;
mod wait;
pub mod wire;
mod world;

pub use coll::{
    ActiveSet, And, BitwiseReduceType, Group, Max, Min, Or, Prod, ReduceOp, ReduceType, Sum, Xor,
};
pub use cuda_interop::SymDevice;
pub use cudarc;
pub use device::module::Module;
pub use error::{Error, Result};
pub use float16::{BF16, F16};
pub use mem::SymBuf;
pub use region::{RegionLayout, RegionMemory, RegionObject};
pub use rma::transfer_bytes;
pub use rshmem_bootstrap::UniqueId;
pub use shared::SharedSymBuf;
pub use stream::cmp_code;
pub use sync::{pick_any, CommCounters};
pub use team::{Team, TeamConfig};
pub use transport::ucx::{probe as probe_ucx, Probe as UcxProbe};
pub use transport::{Caps, TransportInfo};
pub use types::{AmoBitwise, AmoInt, AmoType, Cmp, RmaType, SignalOp};
pub use uid::new_unique_id;
pub use world::{init, Builder, World};

/// Installs rshmem's stderr logger as the process's global `tracing` subscriber: one line per
/// event, `rshmem PE <pe> <LEVEL> <target>: <message>`, written with a single `write`, filtered
/// by `RSHMEM_LOG` (a `tracing` `EnvFilter`: `RSHMEM_LOG=rshmem=debug,rshmem::heap=trace`; a bare
/// level such as `debug` means `rshmem=debug`; unset: warnings and errors). Call it first in
/// `main`, before [`init`]. rshmem never installs a subscriber by itself: a program that calls
/// neither this nor installs its own subscriber does not see rshmem's warnings.
///
/// Returns false (and changes nothing) when a global subscriber is already installed; a program
/// with its own subscriber gets rshmem's events there (targets `rshmem::*`).
pub fn init_logging() -> bool {
    logging::init()
}

mod logging;

/// `eprintln!` with one `write(2)` per line: formats the whole line first, so that the lines of
/// PEs sharing a pipe never interleave (`eprintln!` writes each piece of its format separately
/// on the unbuffered stderr).
macro_rules! say {
    ($($arg:tt)+) => {
        $crate::logging::say_line(format!($($arg)+))
    };
}
pub(crate) use say;
