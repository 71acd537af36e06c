//! The verbs transport (InfiniBand / RoCE) for PEs on other hosts.
//!
//! [`wire`] (what PEs exchange at connect) is compiled in every build; the transport itself
//! (queue pairs, memory regions, completions, through the `sideway` crate, which opens
//! libibverbs at run time) only with the cargo feature `verbs`.
//!
//! **Never run on RDMA hardware**: the machines rshmem is developed and tested on have no
//! InfiniBand or RoCE device. The connection-detail encoding, the transport selection and the
//! "no device" errors are tested; the data path is not. See docs/transports.md.

#[cfg(feature = "verbs")]
mod ib;
pub mod wire;

#[cfg(all(feature = "verbs", test))]
pub use ib::CAPS;
#[cfg(feature = "verbs")]
pub use ib::{Device, Verbs};
