//! The scenarios, one module each (see the crate documentation for the list).

pub mod active_set;
pub mod amo;
pub mod coll;
pub mod crash;
pub mod die;
pub mod embed;
pub mod errors;
pub mod fds;
pub mod gpucoll;
pub mod hang;
pub mod heap;
pub mod idle;
pub mod kill;
pub mod overlap;
pub mod region;
pub mod rma;
pub mod scale;
pub mod signal;
pub mod stream;
pub mod symmetry;
pub mod synccost;
pub mod tcpnet;
pub mod timeout;
pub mod transports;
pub mod wait;
