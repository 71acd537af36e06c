//! The OpenSHMEM profiling interface for the hand-written routines: `pshmem_NAME` for each
//! `shmem_NAME` of `api.rs`, `coll.rs` and `ctx.rs` (the typed routines get theirs from
//! `typed.rs`'s `entry!`).
//!
//! A tool defines `shmem_NAME`, is found before libshmem (`LD_PRELOAD`, or linked before it)
//! and calls `pshmem_NAME`. Here `pshmem_NAME` calls the Rust function `shmem_NAME` of this
//! crate; `build.rs` links `libshmem.so` with `-Bsymbolic-functions`, so that call stays
//! inside the library and never reaches the tool's `shmem_NAME` (which would recurse).
//!
//! A new hand-written routine gets its profiling name by one line in the table below (the
//! `c_programs` test `every_routine_has_a_profiling_twin` fails until it has one), and its
//! `pshmem.h` prototype from `capi/gen.py`, which renames the prototypes of
//! `include/shmem_head.h.in`.

#![allow(unused_unsafe)]

use std::ffi::{c_char, c_int, c_long, c_void};

use crate::coll::Config;

/// For each `module::shmem_NAME(args) -> ret;`, the C routine `pshmem_NAME` that calls
/// `crate::module::shmem_NAME` (arguments that do not fit the routine do not compile).
macro_rules! pshmem {
    ($($module:ident::$name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?;)*) => {
        paste::paste! {
            $(
                #[doc = concat!("`p", stringify!($name), "`: the profiling name of `",
                                stringify!($name), "`.")]
                ///
                /// # Safety
                /// Arguments valid as OpenSHMEM 1.5 requires of the routine.
                #[no_mangle]
                pub unsafe extern "C" fn [<p $name>]($($arg: $ty),*) $(-> $ret)? {
                    // SAFETY: the caller passes arguments valid as OpenSHMEM requires.
                    unsafe { crate::$module::$name($($arg),*) }
                }
            )*
        }
    };
}

pshmem! {
    // Setup, exit, query
    api::shmem_init();
    api::shmem_init_thread(requested: c_int, provided: *mut c_int) -> c_int;
    api::shmem_query_thread(provided: *mut c_int);
    api::shmem_finalize();
    api::shmem_global_exit(status: c_int);
    api::shmem_my_pe() -> c_int;
    api::shmem_n_pes() -> c_int;
    api::shmem_pe_accessible(pe: c_int) -> c_int;
    api::shmem_addr_accessible(addr: *const c_void, pe: c_int) -> c_int;
    api::shmem_ptr(dest: *const c_void, pe: c_int) -> *mut c_void;
    api::shmem_info_get_version(major: *mut c_int, minor: *mut c_int);
    api::shmem_info_get_name(name: *mut c_char);
    api::shmem_query_initialized(initialized: *mut c_int);
    api::shmem_pcontrol(level: c_int);
    // Memory management
    api::shmem_malloc(size: usize) -> *mut c_void;
    api::shmem_malloc_with_hints(size: usize, hints: c_long) -> *mut c_void;
    api::shmem_calloc(count: usize, size: usize) -> *mut c_void;
    api::shmem_align(alignment: usize, size: usize) -> *mut c_void;
    api::shmem_realloc(ptr: *mut c_void, size: usize) -> *mut c_void;
    api::shmem_free(ptr: *mut c_void);
    // Ordering, barriers
    api::shmem_fence();
    api::shmem_quiet();
    api::shmem_barrier_all();
    api::shmem_sync_all();
    coll::shmem_barrier(start: c_int, log_stride: c_int, size: c_int, psync: *mut c_long);
    coll::shmem_sync(start: c_int, log_stride: c_int, size: c_int, psync: *mut c_long);
    // Teams
    coll::shmem_team_my_pe(team: *mut c_void) -> c_int;
    coll::shmem_team_n_pes(team: *mut c_void) -> c_int;
    coll::shmem_team_get_config(team: *mut c_void, mask: c_long, config: *mut Config) -> c_int;
    coll::shmem_team_translate_pe(src: *mut c_void, src_pe: c_int, dest: *mut c_void) -> c_int;
    coll::shmem_team_split_strided(parent: *mut c_void, start: c_int, stride: c_int, size: c_int,
        config: *const Config, mask: c_long, new_team: *mut *mut c_void) -> c_int;
    coll::shmem_team_split_2d(parent: *mut c_void, xrange: c_int, xconfig: *const Config,
        xmask: c_long, xaxis_team: *mut *mut c_void, yconfig: *const Config, ymask: c_long,
        yaxis_team: *mut *mut c_void) -> c_int;
    coll::shmem_team_destroy(team: *mut c_void);
    coll::shmem_team_sync(team: *mut c_void) -> c_int;
    ctx::shmem_ctx_get_team(ctx: *mut c_void, team: *mut *mut c_void) -> c_int;
    api::shmem_team_ptr(team: *mut c_void, dest: *const c_void, pe: c_int) -> *mut c_void;
    // Distributed locks
    api::shmem_set_lock(lock: *mut c_long);
    api::shmem_clear_lock(lock: *mut c_long);
    api::shmem_test_lock(lock: *mut c_long) -> c_int;
    // Contexts
    ctx::shmem_ctx_create(options: c_long, ctx: *mut *mut c_void) -> c_int;
    ctx::shmem_team_create_ctx(team: *mut c_void, options: c_long, ctx: *mut *mut c_void) -> c_int;
    ctx::shmem_ctx_destroy(ctx: *mut c_void);
    ctx::shmem_ctx_fence(ctx: *mut c_void);
    ctx::shmem_ctx_quiet(ctx: *mut c_void);
    ctx::shmem_pe_quiet(target_pes: *const c_int, npes: usize);
    ctx::shmem_ctx_pe_quiet(ctx: *mut c_void, target_pes: *const c_int, npes: usize);
    ctx::shmem_ctx_session_start(ctx: *mut c_void, options: c_long,
        config: *const crate::ctx::SessionConfig, config_mask: c_long);
    ctx::shmem_ctx_session_stop(ctx: *mut c_void);
    // Signals
    api::shmem_signal_fetch(sig: *const u64) -> u64;
    api::shmem_signal_wait_until(sig: *mut u64, cmp: c_int, value: u64) -> u64;
    api::shmem_signal_set(sig: *mut u64, value: u64, pe: c_int);
    api::shmem_signal_add(sig: *mut u64, value: u64, pe: c_int);
    api::shmem_ctx_signal_set(ctx: *mut c_void, sig: *mut u64, value: u64, pe: c_int);
    api::shmem_ctx_signal_add(ctx: *mut c_void, sig: *mut u64, value: u64, pe: c_int);
}
