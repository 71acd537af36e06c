//! The UCX transport for PEs on other hosts, through UCX's UCP API.
//!
//! * [`ffi`] — hand-written declarations of the UCP structs and functions used (UCP API 1.13),
//!   and the loader: libucp is opened at run time (`RSHMEM_UCX_LIB` or `libucp.so.0`), so the
//!   default build has no dependency on UCX and runs where it is not installed.
//! * [`wire`] — what PEs exchange through the bootstrap: worker addresses and packed remote keys.
//! * [`amo`] — atomics applied by rshmem on the target, carried by UCX active messages (GPU
//!   heaps, where UCX's software atomics cannot touch the memory).
//! * [`ucp`] — the transport: context, worker, endpoints, memory mapping, the data path and the
//!   progress thread.
//! * [`wake`] — when the PE's own calls wake the progress thread from its sleep on the worker's
//!   events.
//!
//! What was tested, and on what, is in docs/transports.md ("UCX transport").

pub mod amo;
pub mod ffi;
pub mod ucp;
pub(crate) mod wake;
pub mod wire;

#[cfg(test)]
pub use ucp::CAPS;
pub use ucp::{probe, Probe, Ucx};
