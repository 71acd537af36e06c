//! The stream collectives' compiled modules of one PE ([`CollModules`], a part of the world's
//! device side): loaded on first use by `coll/device.rs`, which launches their kernels.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::cuda::kernels::Kernels;

/// The compiled collective modules of one PE (compiled on first use, cached on disk).
#[derive(Default)]
pub(crate) struct CollModules {
    pub(crate) bytes: OnceLock<std::result::Result<Kernels, String>>,
    pub(crate) reduce: Mutex<HashMap<&'static str, Arc<Kernels>>>,
    pub(crate) sms: OnceLock<u32>,
    pub(crate) sharing: crate::device::sharing::GpuSharing,
}

impl CollModules {
    /// No module loaded yet; `sharing` says how many PEs use this PE's GPU.
    pub(crate) fn new(sharing: crate::device::sharing::GpuSharing) -> Self {
        CollModules {
            sharing,
            ..Default::default()
        }
    }
}
