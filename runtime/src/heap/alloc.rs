//! The deterministic allocator behind the symmetric heap.
//!
//! It manages *offsets* inside one PE's slice, never addresses, and makes the same decisions on
//! every PE given the same sequence of calls: that is what makes allocation symmetric. First fit
//! over an ordered free list with coalescing; the heap's mapped size grows when nothing fits.

use std::collections::BTreeMap;

/// Alignment of every allocation unless a larger one is asked for (a cache line).
pub const MIN_ALIGN: usize = 64;

/// Offsets-only allocator state.
#[derive(Debug, Clone)]
pub struct Allocator {
    /// End of the mapped region (offsets below are backed by memory).
    mapped_end: usize,
    /// Free ranges inside `[start, mapped_end)`: offset -> length. Never adjacent (coalesced).
    free: BTreeMap<usize, usize>,
    /// Live allocations: offset -> (rounded-up length, requested length).
    live: BTreeMap<usize, (usize, usize)>,
}

/// Outcome of a placement attempt that did not fit.
#[derive(Debug, PartialEq, Eq)]
pub struct NeedGrowth {
    /// The mapped end the heap must reach for the request to fit at the end.
    pub needed_end: usize,
}

impl Allocator {
    /// An allocator for offsets `[start, mapped_end)`.
    pub fn new(start: usize, mapped_end: usize) -> Self {
        let mut free = BTreeMap::new();
        if mapped_end > start {
            free.insert(start, mapped_end - start);
        }
        Allocator {
            mapped_end,
            free,
            live: BTreeMap::new(),
        }
    }

    /// End of the mapped region.
    pub fn mapped_end(&self) -> usize {
        self.mapped_end
    }

    /// Bytes currently allocated.
    pub fn in_use(&self) -> usize {
        self.live.values().map(|(_, r)| r).sum()
    }

    /// The live allocation containing `off`, as (offset, requested length).
    pub fn find(&self, off: usize) -> Option<(usize, usize)> {
        let (&o, &(_, r)) = self.live.range(..=off).next_back()?;
        (off < o + r).then_some((o, r))
    }

    /// Requested size of the live allocation starting exactly at `off`.
    pub fn size_of(&self, off: usize) -> Option<usize> {
        self.live.get(&off).map(|&(_, r)| r)
    }

    /// Places `size` bytes (size > 0) at `align` (a power of two). Err says how far the mapped
    /// region must grow.
    pub fn alloc(&mut self, size: usize, align: usize) -> Result<usize, NeedGrowth> {
        let align = align.max(MIN_ALIGN);
        let requested = size;
        let size = round_up(size.max(1), MIN_ALIGN);
        let mut found = None;
        for (&o, &l) in &self.free {
            let a = round_up(o, align);
            if a + size <= o + l {
                found = Some((o, l, a));
                break;
            }
        }
        let Some((o, l, a)) = found else {
            // Fits at the end once the heap grows: after the last free range if it touches the
            // end, else after mapped_end.
            let tail_start = match self.free.iter().next_back() {
                Some((&o, &l)) if o + l == self.mapped_end => o,
                _ => self.mapped_end,
            };
            return Err(NeedGrowth {
                needed_end: round_up(tail_start, align) + size,
            });
        };
        self.free.remove(&o);
        if a > o {
            self.free.insert(o, a - o);
        }
        if a + size < o + l {
            self.free.insert(a + size, o + l - (a + size));
        }
        self.live.insert(a, (size, requested));
        Ok(a)
    }

    /// Extends the mapped region to `new_end` (> mapped_end).
    pub fn grow(&mut self, new_end: usize) {
        debug_assert!(new_end > self.mapped_end);
        let old = self.mapped_end;
        self.mapped_end = new_end;
        self.release(old, new_end - old);
    }

    /// Frees the allocation at `off`; returns its requested size, or None if `off` is not a
    /// live allocation.
    pub fn free(&mut self, off: usize) -> Option<usize> {
        let (size, requested) = self.live.remove(&off)?;
        self.release(off, size);
        Some(requested)
    }

    /// Tries to resize the allocation at `off` in place; true on success.
    pub fn resize_in_place(&mut self, off: usize, new_size: usize) -> bool {
        let Some(&(old, _)) = self.live.get(&off) else {
            return false;
        };
        let new = round_up(new_size.max(1), MIN_ALIGN);
        if new <= old {
            self.live.insert(off, (new, new_size));
            if new < old {
                self.release(off + new, old - new);
            }
            return true;
        }
        let end = off + old;
        match self.free.get(&end).copied() {
            Some(l) if end + l >= off + new => {
                self.free.remove(&end);
                let used = off + new - end;
                if l > used {
                    self.free.insert(end + used, l - used);
                }
                self.live.insert(off, (new, new_size));
                true
            }
            _ => false,
        }
    }

    fn release(&mut self, mut off: usize, mut len: usize) {
        if let Some((&po, &pl)) = self.free.range(..off).next_back() {
            if po + pl == off {
                self.free.remove(&po);
                off = po;
                len += pl;
            }
        }
        if let Some(nl) = self.free.remove(&(off + len)) {
            len += nl;
        }
        self.free.insert(off, len);
    }
}

/// Rounds `x` up to a multiple of `a` (a power of two).
pub fn round_up(x: usize, a: usize) -> usize {
    (x + a - 1) & !(a - 1)
}

/// [`round_up`], or None when the result does not fit in a `usize`.
pub fn checked_round_up(x: usize, a: usize) -> Option<usize> {
    Some(x.checked_add(a - 1)? & !(a - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_and_coalesce() {
        let mut a = Allocator::new(1024, 1024 + 4096);
        let x = a.alloc(100, 1).unwrap();
        let y = a.alloc(64, 1).unwrap();
        let z = a.alloc(1, 1).unwrap();
        assert_eq!((x, y, z), (1024, 1024 + 128, 1024 + 192));
        assert_eq!(a.find(x + 99), Some((x, 100)));
        assert_eq!(a.find(x + 100), None, "past the requested size");
        assert_eq!(a.free(y), Some(64));
        assert_eq!(a.free(y), None, "double free is detected");
        // A 64-byte request reuses y's hole, a 128-byte one does not fit there.
        assert_eq!(a.alloc(128, 1).unwrap(), 1024 + 256);
        assert_eq!(a.alloc(64, 1).unwrap(), y);
        a.free(x);
        a.free(y);
        a.free(z);
        a.free(1024 + 256);
        assert_eq!(a.in_use(), 0);
        // Fully coalesced: the whole region is one free range again.
        assert_eq!(a.alloc(4096, 1).unwrap(), 1024);
    }

    #[test]
    fn alignment_and_growth() {
        let mut a = Allocator::new(64, 64 + 1000 * 64);
        let big = a.alloc(4096, 4096).unwrap();
        assert_eq!(big % 4096, 0);
        let need = a.alloc(1 << 20, 1).unwrap_err();
        assert!(need.needed_end >= big + 4096 + (1 << 20));
        a.grow(need.needed_end);
        let p = a.alloc(1 << 20, 1).unwrap();
        assert!(p + (1 << 20) <= a.mapped_end());
        assert_eq!(a.find(p + 5), Some((p, 1 << 20)));
        assert_eq!(a.find(a.mapped_end() + 1), None);
    }

    #[test]
    fn resize() {
        let mut a = Allocator::new(0, 1 << 16);
        let x = a.alloc(128, 1).unwrap();
        assert!(a.resize_in_place(x, 1024));
        let y = a.alloc(64, 1).unwrap();
        assert_eq!(y, x + 1024);
        assert!(!a.resize_in_place(x, 2048), "blocked by y");
        assert!(a.resize_in_place(x, 64));
        assert_eq!(a.alloc(64, 1).unwrap(), x + 64, "shrunk tail is reusable");
    }

    #[test]
    fn deterministic() {
        let run = || {
            let mut a = Allocator::new(0, 1 << 12);
            let mut v = vec![];
            for i in 1..50usize {
                match a.alloc(i * 37, if i % 3 == 0 { 256 } else { 8 }) {
                    Ok(o) => v.push(o),
                    Err(n) => {
                        a.grow(n.needed_end.max(a.mapped_end() * 2));
                        v.push(a.alloc(i * 37, if i % 3 == 0 { 256 } else { 8 }).unwrap());
                    }
                }
                if i % 4 == 0 {
                    a.free(v[i / 2]);
                }
            }
            v
        };
        assert_eq!(run(), run());
    }
}
