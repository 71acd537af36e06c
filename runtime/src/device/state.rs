//! The device state: the `#[repr(C)]` mirror of `rshmem_device_state` in
//! `device-lib/include/rshmem/state.cuh`. The host fills one per PE and copies it into every
//! module that includes the device library. Size and field offsets are asserted here and in the
//! header (`static_assert`), so a change on one side that is not made on the other fails to
//! build.

/// Layout version; bump on any change (the header's `RSHMEM_DEVICE_STATE_VERSION`).
pub const DEVICE_STATE_VERSION: u32 = 2;

/// Offsets inside every PE's slice of the GPU heap that belong to the runtime.
pub mod internal {
    /// u64: this PE's device barrier epoch.
    pub const BARRIER_EPOCH: usize = 0x0;
    /// u64[MAX_LOCAL_PES] barrier flags, slot j written by local PE j.
    pub const BARRIER_FLAGS: usize = 0x1000;
    /// Most PEs per host the device barrier supports.
    pub const MAX_LOCAL_PES: usize = 512;
    /// Team descriptors (`rshmem_team_desc`, 16 bytes each), indexed by team slot.
    pub const TEAM_TABLE: usize = 0x1_0000;
    /// Bytes of one team descriptor.
    pub const TEAM_DESC: usize = 16;
    /// Team slots with a descriptor and a sync block (the host team code's slot limit).
    pub const MAX_TEAMS: usize = 4096;
    /// `i32[n_pes]`: local index of each PE (-1: another host).
    pub const PE_TABLE: usize = 0x10_0000;
    /// Per-team sync blocks of the device collectives, `TEAM_SYNC_STRIDE` bytes per slot.
    pub const TEAM_SYNC: usize = 0x20_0000;
    /// Bytes of one team sync block (u64 words: flags by team PE, then the control words).
    pub const TEAM_SYNC_STRIDE: usize = 0x2000;
    /// First offset of the user heap in a GPU slice.
    pub const USER_START: usize = TEAM_SYNC + MAX_TEAMS * TEAM_SYNC_STRIDE;
}

/// `flags` bit: device calls check their arguments and trap with a message on bad input.
pub const FLAG_DEBUG: u64 = 0x1;
/// `flags` bit: this host's PEs are numbered contiguously (`my_pe - my_local ..`), so device
/// calls translate PE numbers without reading the PE table.
pub const FLAG_CONTIGUOUS: u64 = 0x2;

/// Mirror of `rshmem_device_state`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceState {
    /// [`DEVICE_STATE_VERSION`].
    pub version: u32,
    /// `size_of::<DeviceState>()`.
    pub size: u32,
    /// This PE.
    pub my_pe: i32,
    /// PEs in the job.
    pub n_pes: i32,
    /// This PE's index among the PEs of its host.
    pub my_local: i32,
    /// PEs on this host.
    pub n_local: i32,
    /// Start of local PE 0's slice.
    pub heap_base: u64,
    /// Bytes of address space per local PE.
    pub slice: u64,
    /// First user offset in a slice.
    pub heap_user_start: u64,
    /// Bytes mapped per slice.
    pub heap_mapped: u64,
    /// Device address of the PE → local index table.
    pub pe_local_table: u64,
    /// Device wait timeout in ns (0: none).
    pub timeout_ns: u64,
    /// `FLAG_*` bits.
    pub flags: u64,
    /// Host-mapped request ring of the proxy (0: no proxy).
    pub proxy_fifo: u64,
    /// Host-mapped proxy control block (counters).
    pub proxy_ctrl: u64,
    /// Requests in the ring (a power of two; 0: no proxy).
    pub proxy_slots: u64,
    /// Device address of the team descriptors (0: none yet).
    pub team_table: u64,
    /// Descriptors in the team table.
    pub team_count: u64,
    /// Lowest offset in a slice of a user buffer registered with
    /// `World::register_buffer_symmetric` (0: none); the device library's debug checks accept
    /// `[heap_reg_start, slice)` besides the heap.
    pub heap_reg_start: u64,
    /// Room for growth without changing the size.
    pub reserved: [u64; 1],
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<DeviceState>() == 136);
    assert!(offset_of!(DeviceState, my_pe) == 8);
    assert!(offset_of!(DeviceState, my_local) == 16);
    assert!(offset_of!(DeviceState, heap_base) == 24);
    assert!(offset_of!(DeviceState, slice) == 32);
    assert!(offset_of!(DeviceState, heap_user_start) == 40);
    assert!(offset_of!(DeviceState, heap_mapped) == 48);
    assert!(offset_of!(DeviceState, pe_local_table) == 56);
    assert!(offset_of!(DeviceState, timeout_ns) == 64);
    assert!(offset_of!(DeviceState, flags) == 72);
    assert!(offset_of!(DeviceState, proxy_fifo) == 80);
    assert!(offset_of!(DeviceState, proxy_ctrl) == 88);
    assert!(offset_of!(DeviceState, proxy_slots) == 96);
    assert!(offset_of!(DeviceState, team_table) == 104);
    assert!(offset_of!(DeviceState, team_count) == 112);
    assert!(offset_of!(DeviceState, heap_reg_start) == 120);
    assert!(offset_of!(DeviceState, reserved) == 128);
    assert!(internal::BARRIER_FLAGS + 8 * internal::MAX_LOCAL_PES <= internal::TEAM_TABLE);
    assert!(internal::TEAM_TABLE + internal::TEAM_DESC * internal::MAX_TEAMS <= internal::PE_TABLE);
    assert!(internal::USER_START == 0x220_0000);
};

/// The unit of a slice in the device library's address translation (`slice_delta` in
/// device-lib/include/rshmem/util.cuh): 1 GiB, the heap's base alignment.
pub const SLICE_UNIT_LOG2: u32 = 30;

impl DeviceState {
    /// Checks what the device library's translation assumes of the slice: a whole number of
    /// GiB, and `n_local` slices counted in GiB within an `i32` (it multiplies in 32 bits).
    pub fn check_slice(&self, call: &'static str) -> crate::Result<()> {
        let units = self.slice >> SLICE_UNIT_LOG2;
        if self.slice & ((1 << SLICE_UNIT_LOG2) - 1) != 0
            || units.saturating_mul(self.n_local.max(0) as u64) > i32::MAX as u64
        {
            return Err(crate::Error::State {
                call,
                reason: format!(
                    "the GPU heap's slice of {} bytes for {} PEs on this host is not a whole \
                     number of GiB below 2^31 GiB in all (the device library's address \
                     translation needs it; lower RSHMEM_HEAP_LIMIT)",
                    self.slice, self.n_local
                ),
            });
        }
        Ok(())
    }

    /// The bytes copied into a module's `rshmem_state`.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: DeviceState is repr(C), Copy, and has no padding (asserted layout: every field
        // is naturally aligned and the offsets are contiguous), so all its bytes are initialized.
        unsafe {
            std::slice::from_raw_parts(
                (self as *const Self).cast::<u8>(),
                std::mem::size_of::<Self>(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_must_be_whole_gib_for_the_device_translation() {
        let st = |slice: u64, n_local: i32| DeviceState {
            slice,
            n_local,
            ..Default::default()
        };
        assert!(st(65 << 30, 8).check_slice("init").is_ok());
        assert!(st(1 << 30, 1).check_slice("init").is_ok());
        let e = st((65 << 30) + 4096, 8)
            .check_slice("init")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("init") && e.contains("whole number of GiB"),
            "{e}"
        );
        // 2^17 GiB per PE on 2^14 PEs: 2^31 GiB, one past what 32 bits hold.
        assert!(st(1 << 47, 1 << 14).check_slice("init").is_err());
        assert!(st(1 << 47, (1 << 14) - 1).check_slice("init").is_ok());
    }
}
