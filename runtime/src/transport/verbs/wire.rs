//! What PEs exchange through the bootstrap to connect verbs queue pairs: the port address (LID,
//! GID, MTU), the queue pair number created for each peer, the first packet sequence number,
//! and the memory keys of the heap chunks. Compiled in every build (a PE built without the
//! `verbs` feature still takes part in the exchange with an empty payload), and tested without
//! hardware.
// Without the feature this PE only decodes what others send.
#![cfg_attr(not(feature = "verbs"), allow(dead_code))]

use crate::frame::push;
use crate::transport::key::Reader;

const MAGIC: [u8; 4] = *b"RSvb";
const VERSION: u8 = 1;
const KEY_BYTES: usize = 1 + 8 + 8 + 8 + 4;

/// One registered heap chunk of a PE, with the memory region's remote key.
pub type Key = crate::transport::key::Key<u32>;

/// A PE's connection details.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnInfo {
    /// Port LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// Port GID at the chosen index (all zero when the port has none, e.g. InfiniBand without a
    /// global route).
    pub gid: [u8; 16],
    /// Active MTU as the verbs enum value (1 = 256 B … 5 = 4096 B).
    pub mtu: u8,
    /// First packet sequence number of every queue pair of this PE (24 bits).
    pub psn: u32,
    /// For every PE, the number of the queue pair this PE created for it (0: none).
    pub qpn: Vec<u32>,
    /// The heap chunks registered so far.
    pub keys: Vec<Key>,
}

/// Encodes memory keys: a count, then one fixed-size record each.
pub fn encode_keys(keys: &[Key], out: &mut Vec<u8>) {
    push(out, keys.len() as u32);
    for k in keys {
        k.encode_place(out);
        push(out, k.rkey);
    }
}

fn read_keys(r: &mut Reader<'_>) -> Result<Vec<Key>, String> {
    let n = r.u32()? as usize;
    if n > r.b.len() / KEY_BYTES {
        return Err(format!(
            "{n} memory keys announced, {} bytes present",
            r.b.len()
        ));
    }
    let mut keys = Vec::with_capacity(n);
    for _ in 0..n {
        keys.push(Key::decode(r, Reader::u32)?);
    }
    Ok(keys)
}

/// Decodes what [`encode_keys`] wrote (and nothing more).
pub fn decode_keys(b: &[u8]) -> Result<Vec<Key>, String> {
    let mut r = Reader {
        b,
        what: "memory keys",
    };
    let keys = read_keys(&mut r)?;
    if !r.b.is_empty() {
        return Err(format!("{} stray bytes after the memory keys", r.b.len()));
    }
    Ok(keys)
}

impl ConnInfo {
    /// The bytes sent through the bootstrap.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(40 + 4 * self.qpn.len() + KEY_BYTES * self.keys.len());
        out.extend_from_slice(&MAGIC);
        push(&mut out, VERSION);
        push(&mut out, self.lid);
        out.extend_from_slice(&self.gid);
        push(&mut out, self.mtu);
        push(&mut out, self.psn);
        push(&mut out, self.qpn.len() as u32);
        for q in &self.qpn {
            push(&mut out, *q);
        }
        encode_keys(&self.keys, &mut out);
        out
    }

    /// Decodes a PE's details for a job of `n` PEs; `Ok(None)` for the empty payload of a PE
    /// without verbs. Anything malformed is an error saying what.
    pub fn decode(b: &[u8], n: usize) -> Result<Option<ConnInfo>, String> {
        if b.is_empty() {
            return Ok(None);
        }
        let mut r = Reader::open(b, "verbs connection details", MAGIC, VERSION)?;
        let lid = r.u16()?;
        let gid: [u8; 16] = r.take(16)?.try_into().unwrap_or([0; 16]);
        let mtu = r.u8()?;
        if !(1..=5).contains(&mtu) {
            return Err(format!("bad MTU code {mtu}"));
        }
        let psn = r.u32()?;
        if psn >= 1 << 24 {
            return Err(format!("packet sequence number {psn:#x} exceeds 24 bits"));
        }
        let count = r.u32()? as usize;
        if count != n {
            return Err(format!(
                "queue pair numbers for {count} PEs in a job of {n}"
            ));
        }
        let mut qpn = Vec::with_capacity(n);
        for _ in 0..n {
            qpn.push(r.u32()?);
        }
        let keys = read_keys(&mut r)?;
        if !r.b.is_empty() {
            return Err(format!(
                "{} stray bytes after the connection details",
                r.b.len()
            ));
        }
        Ok(Some(ConnInfo {
            lid,
            gid,
            mtu,
            psn,
            qpn,
            keys,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::key::find;
    use crate::transport::HeapId;

    fn sample(n: usize) -> ConnInfo {
        ConnInfo {
            lid: 0x1234,
            gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
            mtu: 5,
            psn: 0xabcdef,
            qpn: (0..n as u32)
                .map(|i| if i == 1 { 0 } else { 0x100 + i })
                .collect(),
            keys: vec![
                Key {
                    heap: HeapId::User,
                    start: 0,
                    len: 66 << 20,
                    addr: 0x7f00_0000_0000,
                    rkey: 0xdead_beef,
                },
                Key {
                    heap: HeapId::Ctrl,
                    start: 0,
                    len: 2 << 20,
                    addr: 0x7e00_0000_0000,
                    rkey: 7,
                },
            ],
        }
    }

    #[test]
    fn round_trip() {
        for n in [1, 2, 3, 64] {
            let c = sample(n);
            assert_eq!(ConnInfo::decode(&c.encode(), n).unwrap(), Some(c));
        }
        let mut c = sample(2);
        c.keys.clear();
        assert_eq!(ConnInfo::decode(&c.encode(), 2).unwrap(), Some(c));
        assert_eq!(
            ConnInfo::decode(&[], 4).unwrap(),
            None,
            "a PE without verbs"
        );
    }

    #[test]
    fn malformed_is_an_error_never_a_panic() {
        let good = sample(3).encode();
        // Every truncation fails cleanly.
        for cut in 1..good.len() {
            assert!(ConnInfo::decode(&good[..cut], 3).is_err(), "cut at {cut}");
        }
        let mut extra = good.clone();
        extra.push(0);
        assert!(ConnInfo::decode(&extra, 3).unwrap_err().contains("stray"));
        assert!(ConnInfo::decode(&good, 4).unwrap_err().contains("job of 4"));
        let mut bad = good.clone();
        bad[0] = b'X';
        assert!(ConnInfo::decode(&bad, 3).unwrap_err().contains("magic"));
        let mut bad = good.clone();
        bad[4] = 9;
        assert!(ConnInfo::decode(&bad, 3).unwrap_err().contains("version 9"));
        let mut bad = good.clone();
        bad[4 + 1 + 2 + 16] = 0; // MTU code
        assert!(ConnInfo::decode(&bad, 3).unwrap_err().contains("MTU"));
        let mut bad = good;
        bad[4 + 1 + 2 + 16 + 1 + 3] = 1; // PSN above 24 bits
        assert!(ConnInfo::decode(&bad, 3).unwrap_err().contains("24 bits"));
    }

    #[test]
    fn keys_alone_round_trip_and_lookup() {
        let keys = sample(1).keys;
        let mut b = Vec::new();
        encode_keys(&keys, &mut b);
        assert_eq!(decode_keys(&b).unwrap(), keys);
        assert!(decode_keys(&b[..b.len() - 1]).is_err());
        let mut huge = Vec::new();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(
            decode_keys(&huge).is_err(),
            "a count larger than the payload"
        );
        assert_eq!(
            find(&keys, HeapId::User, 0).map(|k| k.rkey),
            Some(0xdead_beef)
        );
        assert_eq!(
            find(&keys, HeapId::User, (66 << 20) - 1).map(|k| k.rkey),
            Some(0xdead_beef)
        );
        assert!(find(&keys, HeapId::User, 66 << 20).is_none());
        assert_eq!(find(&keys, HeapId::Ctrl, 8).map(|k| k.rkey), Some(7));
    }
}
