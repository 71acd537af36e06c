//! `wait`: wait_until with every comparison on every integer AMO type; wait_until_all/any/some
//! and their `_vector` forms with status exclusion; test/test_all/test_any/test_some (+
//! `_vector`); fully excluded sets returning at once; the `*_any` calls returning every
//! satisfied index in turn. The awaited writes come from the previous
//! PE (a helper thread, after a delay, so that the waits really block).

use std::time::{Duration, Instant};

use rshmem::{Cmp, SymBuf};

use crate::check::{after_delay, expect_eq, Context, Ctx, R};
use crate::each_int_type;
use crate::ensure;
use crate::vals::Int;

const DELAY: Duration = Duration::from_millis(3);

pub fn run(c: &Ctx<'_>) -> R {
    each_int_type!(single(c));
    each_int_type!(sets(c));
    each_int_type!(vectors(c));
    excluded(c)?;
    any_in_turn(c)?;
    Ok(())
}

/// wait_until and test with each comparison. Every step's condition is false on the previous
/// value (checked with test, between barriers) and true on the new one.
fn single<T: Int>(c: &Ctx<'_>) -> R {
    let (w, succ) = (c.w, c.succ());
    let name = T::NAME;
    let v = w.calloc::<T>(1).ctx("calloc")?;
    v.write(0, T::of(100)).ctx("write")?;
    c.barrier("wait_until setup")?;
    let mut steps: Vec<(Cmp, i64, i64)> = vec![
        (Cmp::Eq, 7, 7),
        (Cmp::Ne, 7, 1000),
        (Cmp::Gt, 1000, 1001),
        (Cmp::Ge, 2000, 2000),
        (Cmp::Lt, 2000, 5),
        (Cmp::Le, 4, 4),
    ];
    if T::SIGNED {
        // Signed comparisons: -1 < 0, then -1 >= 1 is false until 3 arrives.
        steps.extend([(Cmp::Lt, 4, -1), (Cmp::Ge, 1, 3), (Cmp::Lt, 0, -1)]);
    } else {
        // Unsigned comparisons: "-1" is the largest value.
        steps.extend([(Cmp::Gt, 1 << 30, -1), (Cmp::Lt, 10, 3)]);
    }
    for &(cmp, value, new) in &steps {
        let (value, new) = (T::of(value), T::of(new));
        let what = format!("wait_until<{name}>({cmp:?}, {value:?})");
        let before = w.test(v.as_ptr(), cmp, value).ctx("test")?;
        ensure!(
            !before,
            "{what}: test is already true on the previous value {:?}",
            v.read(0)
        );
        c.barrier("test before the write")?;
        after_delay(
            DELAY,
            || w.atomic_set(v.as_ptr(), new, succ).ctx("atomic_set"),
            || {
                w.wait_until(v.as_ptr(), cmp, value).ctx(&what)?;
                let got = v.read(0).ok();
                ensure!(
                    got == Some(new),
                    "{what}: returned with the variable at {got:?}, expected {new:?}"
                );
                ensure!(
                    w.test(v.as_ptr(), cmp, value).ctx("test")?,
                    "{what}: test is false after the wait"
                );
                // Satisfied already: returns at once.
                w.wait_until(v.as_ptr(), cmp, value).ctx(&what)
            },
        )?;
        c.barrier("wait_until step")?;
    }
    w.free(v).ctx("free")?;
    Ok(())
}

const M: usize = 6;

fn fresh<'w, T: Int>(c: &Ctx<'w>) -> R<SymBuf<'w, T>> {
    let b = c.w.calloc::<T>(M).ctx("calloc")?;
    c.barrier("calloc ivars")?;
    Ok(b)
}

/// Sets `ivars[i] = v` on the next PE for each (i, v), pausing between writes.
fn writes<T: Int>(c: &Ctx<'_>, ivars: &SymBuf<'_, T>, list: &[(usize, i64)]) -> R {
    for &(i, v) in list {
        c.w.atomic_set(ivars.at(i), T::of(v), c.succ())
            .ctx("atomic_set")?;
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// wait_until_all/any/some and test_all/any/some with one value and a status array.
fn sets<T: Int>(c: &Ctx<'_>) -> R {
    let w = c.w;
    let name = T::NAME;

    // all: elements 2 and 4 are excluded and never written.
    let iv = fresh::<T>(c)?;
    let status = [0, 0, 1, 0, 1, 0];
    ensure!(
        !w.test_all(iv.as_ptr(), M, Some(&status), Cmp::Eq, T::of(1))
            .ctx("test_all")?,
        "test_all<{name}>: true before any write"
    );
    c.barrier("test_all before")?;
    after_delay(
        DELAY,
        || writes(c, &iv, &[(0, 1), (1, 1), (3, 1), (5, 1)]),
        || {
            w.wait_until_all(iv.as_ptr(), M, Some(&status), Cmp::Eq, T::of(1))
                .ctx("wait_until_all")
        },
    )?;
    c.barrier("all writes done")?;
    expect_eq(
        format_args!("wait_until_all<{name}>: the variables"),
        vec![1, 1, 0, 1, 0, 1],
        iv.to_vec()
            .ctx("SymBuf::to_vec")?
            .iter()
            .map(|x| x.bits() as i64)
            .collect::<Vec<_>>(),
    )?;
    ensure!(
        w.test_all(iv.as_ptr(), M, Some(&status), Cmp::Eq, T::of(1))
            .ctx("test_all")?,
        "test_all<{name}>: false with 2 and 4 excluded"
    );
    ensure!(
        !w.test_all(iv.as_ptr(), M, None, Cmp::Eq, T::of(1))
            .ctx("test_all")?,
        "test_all<{name}>: true without the exclusion"
    );
    c.barrier("wait_until_all")?;
    w.free(iv).ctx("free")?;

    // any: element 0 satisfies first but is excluded; element 3 comes later.
    let iv = fresh::<T>(c)?;
    let status = [1, 0, 0, 0, 0, 0];
    after_delay(
        DELAY,
        || writes(c, &iv, &[(0, 5), (3, 5)]),
        || {
            let got = w
                .wait_until_any(iv.as_ptr(), M, Some(&status), Cmp::Eq, T::of(5))
                .ctx("wait_until_any")?;
            expect_eq(
                format_args!("wait_until_any<{name}> with element 0 excluded"),
                Some(3),
                got,
            )
        },
    )?;
    c.barrier("all writes done")?;
    expect_eq(
        format_args!("test_any<{name}> excluding 0"),
        Some(3),
        w.test_any(iv.as_ptr(), M, Some(&status), Cmp::Eq, T::of(5))
            .ctx("test_any")?,
    )?;
    let any = w
        .test_any(iv.as_ptr(), M, None, Cmp::Eq, T::of(5))
        .ctx("test_any")?;
    ensure!(
        any == Some(0) || any == Some(3),
        "test_any<{name}> without exclusion: expected Some(0) or Some(3), got {any:?}"
    );
    expect_eq(
        format_args!("test_any<{name}> for 6"),
        None,
        w.test_any(iv.as_ptr(), M, None, Cmp::Eq, T::of(6))
            .ctx("test_any")?,
    )?;
    c.barrier("wait_until_any")?;
    w.free(iv).ctx("free")?;

    // some: element 0 (excluded) and elements 2 and 4 reach >= 5.
    let iv = fresh::<T>(c)?;
    let status = [1, 0, 0, 0, 0, 0];
    after_delay(
        DELAY,
        || writes(c, &iv, &[(0, 9), (2, 7), (4, 7)]),
        || {
            let got = w
                .wait_until_some(iv.as_ptr(), M, Some(&status), Cmp::Ge, T::of(5))
                .ctx("wait_until_some")?;
            ensure!(
                !got.is_empty() && got.iter().all(|i| *i == 2 || *i == 4),
                "wait_until_some<{name}>: expected a non-empty subset of [2, 4], got {got:?}"
            );
            Ok(())
        },
    )?;
    c.barrier("all writes done")?;
    expect_eq(
        format_args!("test_some<{name}> excluding 0"),
        vec![2, 4],
        w.test_some(iv.as_ptr(), M, Some(&status), Cmp::Ge, T::of(5))
            .ctx("test_some")?,
    )?;
    expect_eq(
        format_args!("test_some<{name}>"),
        vec![0, 2, 4],
        w.test_some(iv.as_ptr(), M, None, Cmp::Ge, T::of(5))
            .ctx("test_some")?,
    )?;
    expect_eq(
        format_args!("test_some<{name}> for > 9"),
        Vec::<usize>::new(),
        w.test_some(iv.as_ptr(), M, None, Cmp::Gt, T::of(9))
            .ctx("test_some")?,
    )?;
    c.barrier("wait_until_some")?;
    w.free(iv).ctx("free")?;
    Ok(())
}

/// The `_vector` forms: one comparison value per element.
fn vectors<T: Int>(c: &Ctx<'_>) -> R {
    let w = c.w;
    let name = T::NAME;
    let values: Vec<T> = [10, 20, 30, 40, 50, 60].into_iter().map(T::of).collect();

    // all_vector (>=): element 1 is excluded and stays 0.
    let iv = fresh::<T>(c)?;
    let status = [0, 1, 0, 0, 0, 0];
    let list: Vec<(usize, i64)> = (0..M)
        .filter(|&i| i != 1)
        .map(|i| (i, 10 * (i as i64 + 1) + i as i64 % 2))
        .collect();
    after_delay(
        DELAY,
        || writes(c, &iv, &list),
        || {
            w.wait_until_all_vector(iv.as_ptr(), Some(&status), Cmp::Ge, &values)
                .ctx("wait_until_all_vector")
        },
    )?;
    c.barrier("all writes done")?;
    ensure!(
        w.test_all_vector(iv.as_ptr(), Some(&status), Cmp::Ge, &values)
            .ctx("test_all_vector")?,
        "test_all_vector<{name}>: false"
    );
    ensure!(
        !w.test_all_vector(iv.as_ptr(), None, Cmp::Ge, &values)
            .ctx("test_all_vector")?,
        "test_all_vector<{name}>: true although element 1 is 0"
    );
    c.barrier("wait_until_all_vector")?;
    w.free(iv).ctx("free")?;

    // any_vector (==): element 5 matches first but is excluded, then element 2.
    let iv = fresh::<T>(c)?;
    let status = [0, 0, 0, 0, 0, 1];
    after_delay(
        DELAY,
        || writes(c, &iv, &[(5, 60), (2, 30)]),
        || {
            let got = w
                .wait_until_any_vector(iv.as_ptr(), Some(&status), Cmp::Eq, &values)
                .ctx("wait_until_any_vector")?;
            expect_eq(
                format_args!("wait_until_any_vector<{name}> with 5 excluded"),
                Some(2),
                got,
            )
        },
    )?;
    c.barrier("all writes done")?;
    expect_eq(
        format_args!("test_any_vector<{name}>"),
        Some(2),
        w.test_any_vector(iv.as_ptr(), Some(&status), Cmp::Eq, &values)
            .ctx("test_any_vector")?,
    )?;
    c.barrier("wait_until_any_vector")?;
    w.free(iv).ctx("free")?;

    // some_vector (!=, against zeros): elements 1 and 4 change.
    let iv = fresh::<T>(c)?;
    let zeros: Vec<T> = vec![T::of(0); M];
    after_delay(
        DELAY,
        || writes(c, &iv, &[(1, -3), (4, 8)]),
        || {
            let got = w
                .wait_until_some_vector(iv.as_ptr(), None, Cmp::Ne, &zeros)
                .ctx("wait_until_some_vector")?;
            ensure!(
                !got.is_empty() && got.iter().all(|i| *i == 1 || *i == 4),
                "wait_until_some_vector<{name}>: expected a non-empty subset of [1, 4], got {got:?}"
            );
            Ok(())
        },
    )?;
    c.barrier("all writes done")?;
    expect_eq(
        format_args!("test_some_vector<{name}>"),
        vec![1, 4],
        w.test_some_vector(iv.as_ptr(), None, Cmp::Ne, &zeros)
            .ctx("test_some_vector")?,
    )?;
    expect_eq(
        format_args!("test_some_vector<{name}> excluding 4"),
        vec![1],
        w.test_some_vector(iv.as_ptr(), Some(&[0, 0, 0, 0, 1, 0]), Cmp::Ne, &zeros)
            .ctx("test_some_vector")?,
    )?;
    c.barrier("wait_until_some_vector")?;
    w.free(iv).ctx("free")?;
    Ok(())
}

/// With every element excluded (or none at all) the waits return at once and the tests
/// give the vacuous answers, although nothing ever satisfies the comparison.
fn excluded(c: &Ctx<'_>) -> R {
    let w = c.w;
    let iv = fresh::<i64>(c)?;
    let all = [1; M];
    let values = [77i64; M];
    let p = iv.as_ptr();
    let start = Instant::now();
    w.wait_until_all(p, M, Some(&all), Cmp::Eq, 77)
        .ctx("wait_until_all, all excluded")?;
    expect_eq(
        "wait_until_any, all excluded",
        None,
        w.wait_until_any(p, M, Some(&all), Cmp::Eq, 77)
            .ctx("wait_until_any")?,
    )?;
    expect_eq(
        "wait_until_some, all excluded",
        Vec::<usize>::new(),
        w.wait_until_some(p, M, Some(&all), Cmp::Eq, 77)
            .ctx("wait_until_some")?,
    )?;
    w.wait_until_all_vector(p, Some(&all), Cmp::Eq, &values)
        .ctx("wait_until_all_vector, all excluded")?;
    expect_eq(
        "wait_until_any_vector, all excluded",
        None,
        w.wait_until_any_vector(p, Some(&all), Cmp::Eq, &values)
            .ctx("wait_until_any_vector")?,
    )?;
    expect_eq(
        "wait_until_some_vector, all excluded",
        Vec::<usize>::new(),
        w.wait_until_some_vector(p, Some(&all), Cmp::Eq, &values)
            .ctx("wait_until_some_vector")?,
    )?;
    w.wait_until_all(p, 0, None, Cmp::Eq, 77)
        .ctx("wait_until_all of 0 elements")?;
    expect_eq(
        "wait_until_any of 0 elements",
        None,
        w.wait_until_any(p, 0, None, Cmp::Eq, 77)
            .ctx("wait_until_any")?,
    )?;
    ensure!(
        w.test_all(p, M, Some(&all), Cmp::Eq, 77).ctx("test_all")?,
        "test_all, all excluded: false"
    );
    expect_eq(
        "test_any, all excluded",
        None,
        w.test_any(p, M, Some(&all), Cmp::Eq, 77).ctx("test_any")?,
    )?;
    expect_eq(
        "test_some, all excluded",
        Vec::<usize>::new(),
        w.test_some(p, M, Some(&all), Cmp::Eq, 77)
            .ctx("test_some")?,
    )?;
    ensure!(
        w.test_all_vector(p, Some(&all), Cmp::Eq, &values)
            .ctx("test_all_vector")?,
        "test_all_vector, all excluded: false"
    );
    expect_eq(
        "test_any_vector, all excluded",
        None,
        w.test_any_vector(p, Some(&all), Cmp::Eq, &values)
            .ctx("test_any_vector")?,
    )?;
    let el = start.elapsed();
    ensure!(
        el < Duration::from_secs(2),
        "fully excluded waits took {el:?}; they must return at once"
    );
    c.barrier("excluded")?;
    w.free(iv).ctx("free")?;
    Ok(())
}

/// While several elements stay satisfied, successive `*_any` calls on one array return each
/// of them in turn (OpenSHMEM: no satisfied element is starved), for the blocking and the
/// testing forms, with one value and with a value per element.
fn any_in_turn(c: &Ctx<'_>) -> R {
    let w = c.w;
    let iv = fresh::<i64>(c)?;
    for i in [1, 4] {
        iv.write(i, 5).ctx("write")?;
    }
    let p = iv.as_ptr();
    let values = [5i64; M];
    in_turn("test_any", || w.test_any(p, M, None, Cmp::Eq, 5))?;
    in_turn("test_any_vector", || {
        w.test_any_vector(p, None, Cmp::Eq, &values)
    })?;
    in_turn("wait_until_any", || {
        w.wait_until_any(p, M, None, Cmp::Eq, 5)
    })?;
    in_turn("wait_until_any_vector", || {
        w.wait_until_any_vector(p, None, Cmp::Eq, &values)
    })?;
    c.barrier("any in turn")?;
    w.free(iv).ctx("free")?;
    Ok(())
}

/// Four calls of `call` while exactly indices 1 and 4 hold: 1, 4, 1, 4 or 4, 1, 4, 1.
fn in_turn(name: &str, call: impl Fn() -> rshmem::Result<Option<usize>>) -> R {
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(call().ctx(name)?);
    }
    let (a, b) = if got[0] == Some(4) { (4, 1) } else { (1, 4) };
    expect_eq(
        format_args!("{name}, four calls while 1 and 4 hold"),
        vec![Some(a), Some(b), Some(a), Some(b)],
        got,
    )
}
