//! `active-set`: the collectives over an OpenSHMEM 1.4 active set ([`rshmem::World::active_set`]):
//! the set of every other PE (start 0 and start 1, log stride 1) and the whole job; set_barrier,
//! set_sync, set_broadcast (the root's `dest` untouched), set_fcollect, set_collect (a different
//! count per member; one member's bad source fails every member), set_alltoalls (strided),
//! set_reduce and reduce_with (a caller's combine, over the set and over a team), with `pSync`
//! checked to be all zeros again after every call;
//! and the errors of a bad set (this PE not in it, PEs outside the job, a short or NULL pSync).

use rshmem::{Group, Sum};

use crate::check::{expect_err, Context, Ctx, Kind, R};
use crate::ensure;

const WORDS: usize = 64;

fn v(j: usize, k: usize) -> u64 {
    (j as u64 + 1) * 1000 + k as u64
}

pub fn run(c: &Ctx<'_>) -> R {
    let w = c.w;
    let psync = w.calloc::<i64>(WORDS).ctx("calloc pSync")?;
    let src = w.calloc::<u64>(64).ctx("calloc")?;
    let dst = w.calloc::<u64>(512).ctx("calloc")?;
    // Between barriers of the whole job (every PE runs the same sequence on its set), so no
    // member has started the next call, whose counters would show.
    let zeros = |what: &str| -> R {
        c.barrier(what)?;
        let p = psync.to_vec().ctx("pSync to_vec")?;
        ensure!(
            p.iter().all(|&x| x == 0),
            "pSync not restored after {what}: {p:?}"
        );
        c.barrier(what)
    };
    // Start 0 / 1 with log stride 1: the even and the odd PEs; then the whole job.
    let parity = c.me % 2;
    let size = (c.n - parity).div_ceil(2);
    for (start, log, size) in [(parity, 1, size), (0, 0, c.n)] {
        let set = w
            .active_set(start, log, size, psync.as_ptr(), WORDS)
            .ctx("active_set")?;
        let (m, i) = (set.members().to_vec(), set.my_index());
        ensure!(m[i] == c.me, "my_index {i} names PE {} in {m:?}", m[i]);
        let n = m.len();
        for k in 0..8 {
            src.write(k, v(i, k)).ctx("write")?;
        }
        dst.copy_from_slice(&[7u64; 512]).ctx("fill dst")?;
        w.set_barrier(&set).ctx("set_barrier")?;
        w.set_sync(&set).ctx("set_sync")?;
        zeros("set_barrier/set_sync")?;

        let root = n - 1;
        w.set_broadcast(&set, dst.as_ptr(), src.as_ptr(), 8, root)
            .ctx("set_broadcast")?;
        for k in 0..8 {
            let want = if i == root { 7 } else { v(root, k) };
            ensure!(
                dst.read(k).ok() == Some(want),
                "set_broadcast dst[{k}]: {:?}, want {want}",
                dst.read(k)
            );
        }
        zeros("set_broadcast")?;

        w.set_fcollect(&set, dst.as_ptr(), src.as_ptr(), 8)
            .ctx("set_fcollect")?;
        for j in 0..n {
            for k in 0..8 {
                ensure!(
                    dst.read(j * 8 + k).ok() == Some(v(j, k)),
                    "set_fcollect dst[{j}][{k}]: {:?}",
                    dst.read(j * 8 + k)
                );
            }
        }
        zeros("set_fcollect")?;

        // Member j contributes j + 1 elements.
        w.set_collect(&set, dst.as_ptr(), src.as_ptr(), i + 1)
            .ctx("set_collect")?;
        let mut at = 0;
        for j in 0..n {
            for k in 0..=j {
                ensure!(
                    dst.read(at).ok() == Some(v(j, k)),
                    "set_collect block {j}[{k}]: {:?}",
                    dst.read(at)
                );
                at += 1;
            }
        }
        zeros("set_collect")?;
        // Member 0's source is not symmetric: it announces a bad count, so every member fails
        // (none is left waiting) and pSync is zero again.
        let stack = [0u64; 8];
        let source = if i == 0 { stack.as_ptr() } else { src.as_ptr() };
        let (kind, what) = if i == 0 {
            (Kind::NotSymmetric, "source")
        } else {
            (Kind::Invalid, "active set member 0")
        };
        let e = expect_err(
            "set_collect with member 0's source on its stack",
            w.set_collect(&set, dst.as_ptr(), source, 1),
            kind,
            "set_collect",
        )?;
        ensure!(e.to_string().contains(what), "set_collect error: {e}");
        zeros("set_collect with a bad source")?;

        // Strided: source stride 2, dest stride 3; block j of member i goes to block i of j.
        for e in 0..2 * n {
            src.write(2 * e, v(i, e)).ctx("write")?;
        }
        dst.copy_from_slice(&[7u64; 512]).ctx("fill dst")?;
        w.set_alltoalls(&set, dst.as_ptr(), src.as_ptr(), 3, 2, 2)
            .ctx("set_alltoalls")?;
        for j in 0..n {
            for k in 0..2 {
                let got = dst.read(3 * (2 * j + k)).ok();
                ensure!(
                    got == Some(v(j, 2 * i + k)),
                    "set_alltoalls dst block {j}[{k}]: {got:?}"
                );
            }
        }
        ensure!(
            dst.read(1).ok() == Some(7),
            "set_alltoalls wrote between the strided elements"
        );
        zeros("set_alltoalls")?;

        for k in 0..8 {
            src.write(k, (i * 10 + k) as u64).ctx("write")?;
        }
        w.set_reduce(&set, dst.as_ptr(), src.as_ptr(), 8, Sum)
            .ctx("set_reduce")?;
        for k in 0..8 {
            let want: u64 = (0..n).map(|j| (j * 10 + k) as u64).sum();
            ensure!(
                dst.read(k).ok() == Some(want),
                "set_reduce dst[{k}]: {:?}, want {want}",
                dst.read(k)
            );
        }
        zeros("set_reduce")?;

        // reduce_with: max of u64s as bytes, over the set and over the world team.
        let mut max = |acc: &mut [u8], b: &[u8]| {
            for (a, b) in acc.chunks_mut(8).zip(b.chunks(8)) {
                let (x, y) = (
                    u64::from_le_bytes(a.try_into().unwrap_or([0; 8])),
                    u64::from_le_bytes(b.try_into().unwrap_or([0; 8])),
                );
                a.copy_from_slice(&x.max(y).to_le_bytes());
            }
        };
        let team = w.team_world();
        for g in [Group::Set(&set), Group::Team(&team)] {
            let members = match g {
                Group::Set(_) => n,
                _ => c.n,
            };
            w.reduce_with(g, dst.as_ptr().cast(), src.as_ptr().cast(), 8, 8, &mut max)
                .ctx("reduce_with")?;
            for k in 0..8 {
                let want = if matches!(g, Group::Set(_)) {
                    ((members - 1) * 10 + k) as u64
                } else {
                    // Over the world every PE's src holds its set index · 10 + k.
                    let top = (0..c.n)
                        .map(|pe| {
                            if start == 0 && log == 0 {
                                pe
                            } else {
                                (pe - pe % 2) / 2
                            }
                        })
                        .max()
                        .unwrap_or(0);
                    (top * 10 + k) as u64
                };
                ensure!(
                    dst.read(k).ok() == Some(want),
                    "reduce_with dst[{k}]: {:?}, want {want}",
                    dst.read(k)
                );
            }
        }
        zeros("reduce_with")?;
        c.barrier("set")?;
    }

    // Errors: nothing is exchanged, so every PE checks them alone.
    let other = (c.me + 1) % 2;
    if c.n >= 2 {
        expect_err(
            "a set without this PE",
            w.active_set(other, 1, 1, psync.as_ptr(), WORDS),
            Kind::Invalid,
            "active_set",
        )?;
    }
    expect_err(
        "PEs outside the job",
        w.active_set(0, 0, c.n + 1, psync.as_ptr(), WORDS),
        Kind::Invalid,
        "active_set",
    )?;
    expect_err(
        "a short pSync",
        w.active_set(0, 0, c.n.max(2), psync.as_ptr(), 1),
        Kind::Invalid,
        "active_set",
    )?;
    expect_err(
        "a NULL pSync",
        w.active_set(0, 0, c.n, std::ptr::null_mut(), WORDS),
        Kind::Invalid,
        "active_set",
    )?;
    let mut stack = [0i64; WORDS];
    expect_err(
        "a pSync on the stack",
        w.active_set(0, 0, c.n, stack.as_mut_ptr(), WORDS),
        Kind::NotSymmetric,
        "active_set",
    )?;
    c.barrier("errors")?;
    w.free(dst).ctx("free")?;
    w.free(src).ctx("free")?;
    w.free(psync).ctx("free")
}
