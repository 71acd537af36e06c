//! Teams by handle: the predefined handles and the teams made by splits (kept in the runtime's
//! `teams` map under their device handle, so a handle means the same team on the host and in
//! kernels).

use std::ffi::{c_int, c_long};

use crate::{fail, invalid, status, with, CResult, Code, Rt};

/// `RSHMEM_TEAM_INVALID`.
pub const TEAM_INVALID: i32 = -1;
/// `RSHMEM_TEAM_NUM_CONTEXTS`.
const NUM_CONTEXTS: c_long = 1;

/// `rshmem_team_config_t`.
#[repr(C)]
pub struct TeamConfigC {
    num_contexts: c_int,
}

/// The team named by `h` on this PE, if any.
pub fn find(rt: &Rt, h: i32) -> CResult<Option<rt::Team>> {
    Ok(match h {
        0 => Some(rt.world.team_world()),
        1 => Some(rt.world.team_shared()),
        2 => Some(rt.world.team_node()),
        _ => rt
            .teams
            .lock()
            .map_err(|_| {
                crate::Fail::Msg(Code::Internal, "the team table's lock is poisoned".into())
            })?
            .get(&h)
            .cloned(),
    })
}

/// The team named by `h`, or an error naming the handle.
pub fn team(rt: &Rt, h: i32) -> CResult<rt::Team> {
    match find(rt, h)? {
        Some(t) => Ok(t),
        None if h == TEAM_INVALID => invalid("the team is RSHMEM_TEAM_INVALID"),
        None => invalid(format!(
            "team handle {h} names no team on this PE (not made by a split, destroyed, or this \
             PE is not a member)"
        )),
    }
}

/// `rshmem_team_my_pe`: **local**; -1 when the handle names no team here.
#[no_mangle]
pub extern "C" fn rshmem_team_my_pe(team_h: i32) -> c_int {
    with("rshmem_team_my_pe", |rt| {
        Ok(find(rt, team_h)?.map_or(-1, |t| t.my_pe() as c_int))
    })
}

/// `rshmem_team_n_pes`: **local**; -1 when the handle names no team here.
#[no_mangle]
pub extern "C" fn rshmem_team_n_pes(team_h: i32) -> c_int {
    with("rshmem_team_n_pes", |rt| {
        Ok(find(rt, team_h)?.map_or(-1, |t| t.n_pes() as c_int))
    })
}

/// `rshmem_team_translate_pe`: **local**; -1 when there is no such PE.
#[no_mangle]
pub extern "C" fn rshmem_team_translate_pe(src: i32, pe: c_int, dest: i32) -> c_int {
    with("rshmem_team_translate_pe", |rt| {
        let (Some(s), Some(d)) = (find(rt, src)?, find(rt, dest)?) else {
            return Ok(-1);
        };
        if pe < 0 {
            return Ok(-1);
        }
        Ok(s.translate_pe(pe as usize, &d).map_or(-1, |p| p as c_int))
    })
}

/// `rshmem_barrier`: **collective over the team**.
#[no_mangle]
pub extern "C" fn rshmem_barrier(team_h: i32) {
    with("rshmem_barrier", |rt| {
        Ok(rt.world.barrier(&team(rt, team_h)?)?)
    })
}

/// `rshmem_team_sync`: **collective over the team**.
#[no_mangle]
pub extern "C" fn rshmem_team_sync(team_h: i32) {
    with("rshmem_team_sync", |rt| {
        Ok(rt.world.team_sync(&team(rt, team_h)?)?)
    })
}

/// A team configuration from C (`mask` says which fields to read).
///
/// # Safety
/// `c` is NULL or points to a `rshmem_team_config_t`.
unsafe fn config_of(c: *const TeamConfigC, mask: c_long) -> CResult<rt::TeamConfig> {
    let mut cfg = rt::TeamConfig::default();
    if mask & !NUM_CONTEXTS != 0 {
        return invalid(format!("config mask {mask:#x} has unknown bits"));
    }
    if mask & NUM_CONTEXTS != 0 {
        // SAFETY: NULL or a valid config, by the caller's contract.
        let Some(c) = (unsafe { c.as_ref() }) else {
            return invalid("the config mask asks for num_contexts but config is NULL");
        };
        if c.num_contexts < 0 {
            return invalid(format!("num_contexts {} is negative", c.num_contexts));
        }
        cfg.num_contexts = c.num_contexts as usize;
    }
    Ok(cfg)
}

/// Records a new team (on its members) and returns its handle, or `RSHMEM_TEAM_INVALID`.
fn register(rt: &Rt, t: Option<rt::Team>) -> CResult<i32> {
    let Some(t) = t else {
        return Ok(TEAM_INVALID);
    };
    let h = t.device_handle();
    rt.teams
        .lock()
        .map_err(|_| crate::Fail::Msg(Code::Internal, "the team table's lock is poisoned".into()))?
        .insert(h, t);
    Ok(h)
}

/// `rshmem_team_split_strided`: **collective over the parent**.
///
/// # Safety
/// `config` is NULL or valid; `new_team` points to a `rshmem_team_t`.
#[no_mangle]
pub unsafe extern "C" fn rshmem_team_split_strided(
    parent: i32,
    start: c_int,
    stride: c_int,
    size: c_int,
    config: *const TeamConfigC,
    config_mask: c_long,
    new_team: *mut i32,
) -> c_int {
    // RSHMEM_TEAM_INVALID first, whatever fails next (also a call before init).
    if !new_team.is_null() {
        // SAFETY: non-null, by the caller's contract.
        unsafe { *new_team = TEAM_INVALID };
    }
    status("rshmem_team_split_strided", |rt| {
        if new_team.is_null() {
            return invalid("new_team is NULL");
        }
        if start < 0 || size < 1 {
            return invalid(format!(
                "start {start} must be at least 0 and size {size} at least 1"
            ));
        }
        // SAFETY: the caller's contract.
        let cfg = unsafe { config_of(config, config_mask) }?;
        let p = team(rt, parent)?;
        let t = rt.world.team_split_strided_with(
            &p,
            start as usize,
            stride as isize,
            size as usize,
            cfg,
        )?;
        let h = register(rt, t)?;
        // SAFETY: as above.
        unsafe { *new_team = h };
        Ok(())
    })
}

/// `rshmem_team_split_2d`: **collective over the parent**.
///
/// # Safety
/// Configs NULL or valid; `xaxis_team` and `yaxis_team` point to `rshmem_team_t`s.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn rshmem_team_split_2d(
    parent: i32,
    xrange: c_int,
    xaxis_config: *const TeamConfigC,
    xaxis_mask: c_long,
    xaxis_team: *mut i32,
    yaxis_config: *const TeamConfigC,
    yaxis_mask: c_long,
    yaxis_team: *mut i32,
) -> c_int {
    // RSHMEM_TEAM_INVALID first in each output given, whatever fails next (also a call before
    // init, or the other output NULL).
    for out in [xaxis_team, yaxis_team] {
        if !out.is_null() {
            // SAFETY: non-null, by the caller's contract.
            unsafe { *out = TEAM_INVALID };
        }
    }
    status("rshmem_team_split_2d", |rt| {
        if xaxis_team.is_null() || yaxis_team.is_null() {
            return invalid("xaxis_team and yaxis_team must not be NULL");
        }
        if xrange < 1 {
            return invalid(format!("xrange {xrange} must be at least 1"));
        }
        // SAFETY: the caller's contract.
        let (xc, yc) = unsafe {
            (
                config_of(xaxis_config, xaxis_mask)?,
                config_of(yaxis_config, yaxis_mask)?,
            )
        };
        let p = team(rt, parent)?;
        let (x, y) = rt.world.team_split_2d_with(&p, xrange as usize, xc, yc)?;
        let (hx, hy) = (register(rt, Some(x))?, register(rt, Some(y))?);
        // SAFETY: as above.
        unsafe {
            *xaxis_team = hx;
            *yaxis_team = hy;
        }
        Ok(())
    })
}

/// `rshmem_team_get_config`: **local**.
///
/// # Safety
/// `config` points to a `rshmem_team_config_t`.
#[no_mangle]
pub unsafe extern "C" fn rshmem_team_get_config(
    team_h: i32,
    config_mask: c_long,
    config: *mut TeamConfigC,
) -> c_int {
    status("rshmem_team_get_config", |rt| {
        if config.is_null() {
            return invalid("config is NULL");
        }
        if config_mask & !NUM_CONTEXTS != 0 {
            return invalid(format!("config mask {config_mask:#x} has unknown bits"));
        }
        let t = team(rt, team_h)?;
        if config_mask & NUM_CONTEXTS != 0 {
            let n = t.get_config().num_contexts;
            // SAFETY: non-null, by the caller's contract.
            unsafe { (*config).num_contexts = c_int::try_from(n).unwrap_or(c_int::MAX) };
        }
        Ok(())
    })
}

/// `rshmem_team_destroy`: **collective over the team**.
#[no_mangle]
pub extern "C" fn rshmem_team_destroy(team_h: i32) {
    with("rshmem_team_destroy", |rt| {
        if (0..=2).contains(&team_h) {
            return fail(
                Code::InvalidValue,
                format!("team {team_h} is predefined and cannot be destroyed"),
            );
        }
        let t = team(rt, team_h)?;
        rt.world.team_destroy(t)?;
        if let Ok(mut m) = rt.teams.lock() {
            m.remove(&team_h);
        }
        Ok(())
    })
}
