//! A heap chunk registered with a network transport (UCX, verbs), as its PE publishes it to
//! the others: where the chunk lies in that PE's heap and address space, and the transport's
//! remote key for it. Payloads are read with [`Reader`] (`crate::frame`, shared by every
//! payload decoder): a malformed payload from a peer is an error saying what is wrong, never a
//! panic.

pub use crate::frame::Reader;

use super::{Chunk, HeapId};
use crate::frame::push;

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
        push(out, self.heap as u8);
        push(out, self.start);
        push(out, self.len);
        push(out, self.addr);
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
