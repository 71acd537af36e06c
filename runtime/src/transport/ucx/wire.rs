//! What PEs exchange through the bootstrap for the UCX transport: the UCP worker address (at
//! init) and the packed remote keys of registered heap chunks (at init and whenever the heap
//! grows). Everything a peer sends is checked before use: a truncated or malformed payload is
//! an error naming what is wrong, never a panic.

use crate::frame::push;
use crate::transport::key::Reader;

const MAGIC: [u8; 4] = *b"RSux";
const VERSION: u8 = 1;

/// One registered heap chunk of a PE, with its packed UCP remote key (`ucp_rkey_pack` output).
pub type Key = crate::transport::key::Key<Vec<u8>>;

/// A PE's payload: its worker address (empty in a key-only update) and its new keys.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Payload {
    /// `ucp_worker_get_address` output.
    pub address: Vec<u8>,
    /// Chunks registered since the last exchange.
    pub keys: Vec<Key>,
}

impl Payload {
    /// Magic, version, address, keys; lengths as little-endian u32.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(16 + self.address.len() + self.keys.len() * 64);
        b.extend_from_slice(&MAGIC);
        push(&mut b, VERSION);
        push(&mut b, self.address.len() as u32);
        b.extend_from_slice(&self.address);
        push(&mut b, self.keys.len() as u32);
        for k in &self.keys {
            k.encode_place(&mut b);
            push(&mut b, k.rkey.len() as u32);
            b.extend_from_slice(&k.rkey);
        }
        b
    }

    /// The inverse of [`encode`](Payload::encode); the error says what is wrong.
    pub fn decode(b: &[u8]) -> Result<Payload, String> {
        let mut r = Reader::open(b, "a UCX transport payload", MAGIC, VERSION)?;
        let alen = r.u32()? as usize;
        let address = r.take(alen)?.to_vec();
        let n = r.u32()? as usize;
        let mut keys = Vec::new();
        for i in 0..n {
            let key = Key::decode(&mut r, |r| {
                let klen = r.u32()? as usize;
                Ok(r.take(klen)?.to_vec())
            });
            keys.push(key.map_err(|e| format!("key {i}: {e}"))?);
        }
        if !r.b.is_empty() {
            return Err(format!("{} trailing bytes", r.b.len()));
        }
        Ok(Payload { address, keys })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::HeapId;

    fn sample() -> Payload {
        Payload {
            address: vec![7; 79],
            keys: vec![
                Key {
                    heap: HeapId::Ctrl,
                    start: 0,
                    len: 2 << 20,
                    addr: 0x7f00_0000_0000,
                    rkey: vec![1, 2, 3],
                },
                Key {
                    heap: HeapId::User,
                    start: 64 << 20,
                    len: 64 << 20,
                    addr: 0x7e00_0000_0000,
                    rkey: vec![9; 40],
                },
            ],
        }
    }

    #[test]
    fn round_trip() {
        let p = sample();
        assert_eq!(Payload::decode(&p.encode()), Ok(p));
        let empty = Payload::default();
        assert_eq!(Payload::decode(&empty.encode()), Ok(empty));
    }

    #[test]
    fn every_truncation_and_extension_is_an_error() {
        let b = sample().encode();
        for n in 0..b.len() {
            assert!(
                Payload::decode(&b[..n]).is_err(),
                "prefix of {n} bytes decoded"
            );
        }
        let mut longer = b.clone();
        longer.push(0);
        assert!(Payload::decode(&longer).unwrap_err().contains("trailing"));
    }

    #[test]
    fn bad_fields_are_named() {
        let b = sample().encode();
        let mut m = b.clone();
        m[0] = b'X';
        assert!(Payload::decode(&m).unwrap_err().contains("magic"));
        let mut m = b.clone();
        m[4] = 99;
        assert!(Payload::decode(&m).unwrap_err().contains("version 99"));
        // The first key's heap byte follows magic, version, address and key count.
        let at = 4 + 1 + 4 + 79 + 4;
        let mut m = b.clone();
        m[at] = 5;
        assert!(Payload::decode(&m).unwrap_err().contains("unknown heap 5"));
        // A length field claiming more than is there.
        let mut m = b;
        m[5..9].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Payload::decode(&m).unwrap_err().contains("truncated"));
    }
}
