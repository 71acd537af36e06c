//! A heap chunk registered with a network transport (UCX, verbs), as its PE publishes it to
//! the others: where the chunk lies in that PE's heap and address space, and the transport's
//! remote key for it; with the little-endian reader the transports' payload decoders share.
//! A malformed payload from a peer is an error saying what is wrong, never a panic.

use super::{Chunk, HeapId};

/// One registered heap chunk of a PE: offsets `[start, start+len)` of heap `heap` are at the
/// registering PE's virtual address `addr`, reachable with remote key `rkey` (packed bytes
/// for UCX, a 32-bit key for verbs, an unpacked handle once a peer has it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key<R> {
    /// Which heap.
    pub heap: HeapId,
    /// First offset.
    pub start: u64,
    /// Bytes.
    pub len: u64,
    /// The registering PE's address of `start`.
    pub addr: u64,
    /// The transport's remote key.
    pub rkey: R,
}

impl<R> Key<R> {
    /// The key of this PE's `chunk`.
    pub fn of(chunk: &Chunk, rkey: R) -> Key<R> {
        Key {
            heap: chunk.heap,
            start: chunk.start as u64,
            len: chunk.len as u64,
            addr: chunk.addr() as u64,
            rkey,
        }
    }

    /// The same chunk under another form of its remote key.
    pub fn with<S>(&self, rkey: S) -> Key<S> {
        Key {
            heap: self.heap,
            start: self.start,
            len: self.len,
            addr: self.addr,
            rkey,
        }
    }

    /// Appends heap, start, length and address (the caller appends the remote key).
    pub fn encode_place(&self, out: &mut Vec<u8>) {
        out.push(self.heap as u8);
        out.extend_from_slice(&self.start.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.addr.to_le_bytes());
    }

    /// Reads what [`encode_place`](Key::encode_place) wrote, then the remote key with `rkey`.
    pub fn decode<'a>(
        r: &mut Reader<'a>,
        rkey: impl FnOnce(&mut Reader<'a>) -> Result<R, String>,
    ) -> Result<Key<R>, String> {
        let h = r.u8()?;
        let heap = HeapId::from_code(h).ok_or_else(|| format!("unknown heap {h}"))?;
        let (start, len, addr) = (r.u64()?, r.u64()?, r.u64()?);
        if start.checked_add(len).is_none() || addr.checked_add(len).is_none() {
            return Err(format!("memory key range {start:#x}+{len:#x} overflows"));
        }
        Ok(Key {
            heap,
            start,
            len,
            addr,
            rkey: rkey(r)?,
        })
    }
}

/// The key of `heap` whose chunk holds offset `off` (a range that crosses chunks is split by
/// the caller at `start + len` of the key returned).
pub fn find<R>(keys: &[Key<R>], heap: HeapId, off: u64) -> Option<&Key<R>> {
    keys.iter()
        .find(|k| k.heap == heap && off >= k.start && off - k.start < k.len)
}

/// Little-endian reader of a peer's payload that reports what was missing.
pub struct Reader<'a> {
    /// What is left to read.
    pub b: &'a [u8],
    /// What the payload is (for errors).
    pub what: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader of the payload `b` (`what`, for errors) after its 4-byte magic and its
    /// version byte, both checked.
    pub fn open(
        b: &'a [u8],
        what: &'static str,
        magic: [u8; 4],
        version: u8,
    ) -> Result<Reader<'a>, String> {
        let mut r = Reader { b, what };
        if r.take(4)? != magic {
            return Err(format!("not {what} (bad magic)"));
        }
        let v = r.u8()?;
        if v != version {
            return Err(format!(
                "{what} of version {v}, this rshmem speaks {version} (mixed rshmem versions in one job?)"
            ));
        }
        Ok(r)
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.b.len() < n {
            return Err(format!(
                "truncated {} ({} bytes left, {n} needed)",
                self.what,
                self.b.len()
            ));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }

    /// The next `N` bytes as an array.
    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// A byte.
    pub fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    /// A little-endian u16.
    pub fn u16(&mut self) -> Result<u16, String> {
        self.array().map(u16::from_le_bytes)
    }

    /// A little-endian u32.
    pub fn u32(&mut self) -> Result<u32, String> {
        self.array().map(u32::from_le_bytes)
    }

    /// A little-endian u64.
    pub fn u64(&mut self) -> Result<u64, String> {
        self.array().map(u64::from_le_bytes)
    }
}
