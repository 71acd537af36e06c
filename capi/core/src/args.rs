//! Conversion and checks of C arguments, shared by both C libraries: PE numbers, local
//! buffers, counts, comparison and signal codes, and the set waits and tests. Where the two
//! ABIs word a message differently (they name their own constants), [`Abi`] chooses the words.

use std::ffi::c_int;

use rshmem::{AmoInt, Cmp, RmaType, SignalOp, World};

use crate::{invalid, CResult};

/// Which C library is calling: the words of its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abi {
    /// `libshmem` (`shmem.h`, `SHMEM_*` constants).
    Shmem,
    /// `librshmem` (`rshmem.h`, `RSHMEM_*` constants).
    Rshmem,
}

impl Abi {
    /// Converts a C comparison constant (`SHMEM_CMP_*` / `RSHMEM_CMP_*`: the same codes, the
    /// runtime's one table `rshmem::wire`).
    pub fn cmp_of(self, cmp: c_int) -> CResult<Cmp> {
        Cmp::try_from(cmp).or_else(|e| {
            invalid(match self {
                Abi::Shmem => format!("{cmp} is not a SHMEM_CMP_* constant"),
                Abi::Rshmem => format!("{e}: use an RSHMEM_CMP_* constant"),
            })
        })
    }

    /// Converts a C signal operation (`*_SIGNAL_SET`, `*_SIGNAL_ADD`).
    pub fn sigop_of(self, op: c_int) -> CResult<SignalOp> {
        SignalOp::try_from(op).or_else(|e| {
            invalid(match self {
                Abi::Shmem => format!("{op} is not SHMEM_SIGNAL_SET or SHMEM_SIGNAL_ADD"),
                Abi::Rshmem => format!("{e}: use RSHMEM_SIGNAL_SET or RSHMEM_SIGNAL_ADD"),
            })
        })
    }

    /// How messages name the `status`, `cmp_values` and `indices` arrays of a set wait.
    fn set_names(self) -> [&'static str; 3] {
        match self {
            Abi::Shmem => [
                "the source buffer",
                "the source buffer",
                "the destination buffer",
            ],
            Abi::Rshmem => ["status", "cmp_values", "indices"],
        }
    }

    /// The inputs of a set wait or test: the comparison, the exclusion mask and the
    /// per-element values (each `None` when NULL).
    ///
    /// # Safety
    /// `a.status` and `a.values`, where not NULL, are valid for reads of `a.n` elements for
    /// `'a`.
    pub unsafe fn set_inputs<'a, T>(self, a: &SetArgs<T>) -> CResult<SetInputs<'a, T>> {
        let [status, values, _] = self.set_names();
        let cmp = self.cmp_of(a.cmp)?;
        let status = if a.status.is_null() {
            None
        } else {
            // SAFETY: the caller's contract.
            Some(unsafe { src_slice(status, a.status, a.n) }?)
        };
        let values = if a.values.is_null() {
            None
        } else {
            // SAFETY: the caller's contract.
            Some(unsafe { src_slice(values, a.values, a.n) }?)
        };
        Ok(SetInputs {
            cmp,
            status,
            values,
        })
    }

    /// The C answer of a set wait or test from (condition held, indices that hold): 1/0 for
    /// [`Set::All`], an index or `SIZE_MAX` for [`Set::Any`], a count for [`Set::Some`] (the
    /// indices written to `a.indices`).
    ///
    /// # Safety
    /// For [`Set::Some`] with hits, `a.indices` is valid for writes of `a.n` elements.
    pub unsafe fn set_answer<T>(
        self,
        a: &SetArgs<T>,
        set: Set,
        (ok, hits): (bool, Vec<usize>),
    ) -> CResult<usize> {
        Ok(match set {
            Set::All => ok as usize,
            Set::Any => hits.first().copied().unwrap_or(usize::MAX),
            Set::Some => {
                if !hits.is_empty() {
                    // SAFETY: the caller's contract: indices has room for n entries.
                    let out = unsafe { dst_slice(self.set_names()[2], a.indices, a.n) }?;
                    for (o, h) in out.iter_mut().zip(&hits) {
                        *o = *h;
                    }
                }
                hits.len()
            }
        })
    }
}

/// Converts a C PE number of a job (or team) of `n` PEs.
pub fn pe_in(n: usize, pe: c_int) -> CResult<usize> {
    if pe < 0 || pe as usize >= n {
        return invalid(format!(
            "PE {pe} is out of range: the job has {n} PEs (0..{n})"
        ));
    }
    Ok(pe as usize)
}

/// A C root, stride or count that must not be negative.
pub fn nonneg(what: &str, v: i64) -> CResult<usize> {
    usize::try_from(v).or_else(|_| invalid(format!("{what} {v} is negative")))
}

/// Checks a local buffer of `n` elements (`what` names it in errors): false when empty.
fn buffer<T>(what: &str, p: *const T, n: usize) -> CResult<bool> {
    if n == 0 {
        return Ok(false);
    }
    if p.is_null() {
        return invalid(format!("{what} is NULL"));
    }
    if (p as usize) % std::mem::align_of::<T>() != 0 {
        return invalid(format!("{what} {p:p} is misaligned"));
    }
    // A slice longer than isize::MAX bytes is undefined behaviour (a wrapped count once
    // silently moved 8 bytes or none): refuse it as every other transfer does.
    if let Err(why) = rshmem::transfer_bytes::<T>(n) {
        return invalid(why);
    }
    Ok(true)
}

/// A local buffer of `n` elements as a slice (`what` names it in errors: "the source buffer").
///
/// # Safety
/// `p` must be valid for reads of `n` elements (when `n > 0`) for `'a`.
pub unsafe fn src_slice<'a, T>(what: &str, p: *const T, n: usize) -> CResult<&'a [T]> {
    if !buffer(what, p, n)? {
        return Ok(&[]);
    }
    // SAFETY: non-null, aligned, at most isize::MAX bytes (checked), and valid for n elements
    // by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// A local buffer of `n` elements as a mutable slice.
///
/// # Safety
/// `p` must be valid for writes of `n` elements (when `n > 0`) for `'a`.
pub unsafe fn dst_slice<'a, T>(what: &str, p: *mut T, n: usize) -> CResult<&'a mut [T]> {
    if !buffer(what, p.cast_const(), n)? {
        return Ok(&mut []);
    }
    // SAFETY: non-null, aligned, at most isize::MAX bytes (checked), and valid for n elements
    // by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

/// Which way a host RMA call moves data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// From the local buffer (the source) to the symmetric one of a PE.
    Put,
    /// From the symmetric buffer of a PE into the local one (the destination).
    Get,
}

/// A host put or get (`put`, `get`, and with `nbi` their `_nbi` forms) of `n` elements between
/// the host buffer `local` (the source of a put, the destination of a get; checked for NULL,
/// alignment and size) and the symmetric `remote` on PE `pe`. The `_nbi` forms may read the
/// source, or fill the destination, until the next quiet (OpenSHMEM's rule), so over UCX they
/// are only posted.
///
/// # Safety
/// `local` valid for `n` reads (put) or writes (get) and, with `nbi`, left alone until the
/// next quiet returns.
pub unsafe fn host_rma<T: RmaType>(
    w: &World,
    way: Way,
    local: *const T,
    remote: *const T,
    n: usize,
    pe: usize,
    nbi: bool,
) -> CResult<()> {
    match way {
        Way::Put => {
            // SAFETY: the caller's contract (checked for NULL and alignment here).
            let s = unsafe { src_slice("the source buffer", local, n) }?;
            let dest = remote.cast_mut();
            if nbi {
                // SAFETY: the caller's contract: the source stays until the next quiet.
                Ok(unsafe { w.put_nbi_deferred(dest, s.as_ptr(), n, pe) }?)
            } else {
                Ok(w.put(dest, s, pe)?)
            }
        }
        Way::Get => {
            // SAFETY: the caller's contract (checked for NULL and alignment here).
            let d = unsafe { dst_slice("the destination buffer", local.cast_mut(), n) }?;
            if nbi {
                // SAFETY: the caller's contract: the destination stays until the next quiet.
                Ok(unsafe { w.get_nbi_deferred(d.as_mut_ptr(), remote, n, pe) }?)
            } else {
                Ok(w.get(d, remote, pe)?)
            }
        }
    }
}

/// A host put with signal of `n` elements from the host buffer `src` (checked for NULL,
/// alignment and size) to the symmetric `dest` on PE `pe`, then the update `op` of the signal
/// word `sig` there by `value` (`signal` = (sig, value, op)); with `nbi`, non-blocking.
///
/// # Safety
/// `src` valid for `n` reads (`nbi`: and left alone until the next quiet returns).
pub unsafe fn host_put_signal<T: RmaType>(
    w: &World,
    dest: *mut T,
    src: *const T,
    n: usize,
    (sig, value, op): (*mut u64, u64, SignalOp),
    pe: usize,
    nbi: bool,
) -> CResult<()> {
    // SAFETY: the caller's contract (checked for NULL and alignment here).
    let s = unsafe { src_slice("the source buffer", src, n) }?;
    if nbi {
        Ok(w.put_signal_nbi(dest, s, sig, value, op, pe)?)
    } else {
        Ok(w.put_signal(dest, s, sig, value, op, pe)?)
    }
}

/// Which set wait or test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Set {
    /// Every element (`*_all`).
    All,
    /// One element (`*_any`).
    Any,
    /// At least one; report all that hold (`*_some`).
    Some,
}

/// The arguments of a set wait or test as C passed them (the single-variable forms are
/// `n == 1`, [`Set::All`]).
pub struct SetArgs<T> {
    /// The variables.
    pub ivars: *const T,
    /// How many.
    pub n: usize,
    /// Output indices (`_some` forms) or NULL.
    pub indices: *mut usize,
    /// Exclusion mask or NULL.
    pub status: *const c_int,
    /// The comparison constant.
    pub cmp: c_int,
    /// One value for all.
    pub value: T,
    /// Or one value per element (vector forms), else NULL.
    pub values: *const T,
}

/// The converted inputs of a set wait ([`Abi::set_inputs`]).
pub struct SetInputs<'a, T> {
    /// The comparison.
    pub cmp: Cmp,
    /// The exclusion mask.
    pub status: Option<&'a [c_int]>,
    /// The per-element values.
    pub values: Option<&'a [T]>,
}

/// Runs a set wait (`block`) or test through the runtime: (condition held, indices that hold).
pub fn world_set<T: AmoInt>(
    w: &World,
    a: &SetArgs<T>,
    i: &SetInputs<'_, T>,
    set: Set,
    block: bool,
) -> rshmem::Result<(bool, Vec<usize>)> {
    let (iv, n, st, cmp, v) = (a.ivars, a.n, i.status, i.cmp, a.value);
    let one = |x: Option<usize>| (x.is_some(), x.into_iter().collect::<Vec<_>>());
    let many = |x: Vec<usize>| (!x.is_empty(), x);
    let all = |b: bool| (b, vec![]);
    match (set, block, i.values) {
        (Set::All, true, None) => w.wait_until_all(iv, n, st, cmp, v).map(|_| all(true)),
        (Set::All, true, Some(vs)) => w.wait_until_all_vector(iv, st, cmp, vs).map(|_| all(true)),
        (Set::Any, true, None) => w.wait_until_any(iv, n, st, cmp, v).map(one),
        (Set::Any, true, Some(vs)) => w.wait_until_any_vector(iv, st, cmp, vs).map(one),
        (Set::Some, true, None) => w.wait_until_some(iv, n, st, cmp, v).map(many),
        (Set::Some, true, Some(vs)) => w.wait_until_some_vector(iv, st, cmp, vs).map(many),
        (Set::All, false, None) => w.test_all(iv, n, st, cmp, v).map(all),
        (Set::All, false, Some(vs)) => w.test_all_vector(iv, st, cmp, vs).map(all),
        (Set::Any, false, None) => w.test_any(iv, n, st, cmp, v).map(one),
        (Set::Any, false, Some(vs)) => w.test_any_vector(iv, st, cmp, vs).map(one),
        (Set::Some, false, None) => w.test_some(iv, n, st, cmp, v).map(many),
        (Set::Some, false, Some(vs)) => w.test_some_vector(iv, st, cmp, vs).map(many),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_words_per_abi() {
        assert_eq!(Abi::Shmem.cmp_of(5).ok(), Some(Cmp::Le));
        assert_eq!(Abi::Rshmem.cmp_of(0).ok(), Some(Cmp::Eq));
        let e = Abi::Shmem.cmp_of(9).unwrap_err().to_string();
        assert_eq!(e, "9 is not a SHMEM_CMP_* constant");
        let e = Abi::Rshmem.cmp_of(9).unwrap_err().to_string();
        assert!(e.ends_with(": use an RSHMEM_CMP_* constant"), "{e}");
        let e = Abi::Shmem.sigop_of(2).unwrap_err().to_string();
        assert_eq!(e, "2 is not SHMEM_SIGNAL_SET or SHMEM_SIGNAL_ADD");
        let e = Abi::Rshmem.sigop_of(-1).unwrap_err().to_string();
        assert!(
            e.ends_with(": use RSHMEM_SIGNAL_SET or RSHMEM_SIGNAL_ADD"),
            "{e}"
        );
        assert!(matches!(Abi::Shmem.sigop_of(1), Ok(SignalOp::Add)));
    }

    #[test]
    fn pe_and_counts() {
        assert_eq!(pe_in(4, 3).ok(), Some(3));
        let e = pe_in(4, 4).unwrap_err().to_string();
        assert_eq!(e, "PE 4 is out of range: the job has 4 PEs (0..4)");
        assert!(pe_in(4, -1).is_err());
        assert_eq!(nonneg("root", 2).ok(), Some(2));
        assert_eq!(
            nonneg("root", -2).unwrap_err().to_string(),
            "root -2 is negative"
        );
    }

    #[test]
    fn buffers_are_checked() {
        let v = [1u64, 2, 3];
        // SAFETY: `v` is valid for 3 reads.
        let s = unsafe { src_slice("the source buffer", v.as_ptr(), 3) }.unwrap();
        assert_eq!(s, &v);
        // SAFETY: a zero count reads nothing.
        assert!(unsafe { src_slice::<u64>("x", std::ptr::null(), 0) }
            .unwrap()
            .is_empty());
        // SAFETY: NULL is refused before any read.
        let e = unsafe { src_slice::<u64>("the source buffer", std::ptr::null(), 1) };
        assert_eq!(e.unwrap_err().to_string(), "the source buffer is NULL");
        let odd = (v.as_ptr() as usize + 1) as *mut u64;
        // SAFETY: a misaligned pointer is refused before any write.
        let e = unsafe { dst_slice("indices", odd, 1) }
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("indices 0x") && e.ends_with(" is misaligned"),
            "{e}"
        );
        // SAFETY: the count is refused before any read.
        assert!(unsafe { src_slice("big", v.as_ptr(), usize::MAX / 2) }.is_err());
    }

    #[test]
    fn set_answers() {
        let mut idx = [0usize; 4];
        let a = SetArgs {
            ivars: std::ptr::null::<i32>(),
            n: 4,
            indices: idx.as_mut_ptr(),
            status: std::ptr::null(),
            cmp: 0,
            value: 0,
            values: std::ptr::null(),
        };
        // SAFETY: `idx` has room for 4 entries.
        let r = |set, hits: Vec<usize>| unsafe { Abi::Rshmem.set_answer(&a, set, (true, hits)) };
        assert_eq!(r(Set::All, vec![]).ok(), Some(1));
        assert_eq!(r(Set::Any, vec![]).ok(), Some(usize::MAX));
        assert_eq!(r(Set::Any, vec![2, 3]).ok(), Some(2));
        assert_eq!(r(Set::Some, vec![1, 3]).ok(), Some(2));
        assert_eq!(&idx[..2], &[1, 3]);
    }
}
