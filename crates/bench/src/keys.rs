//! Record keys and values.
//!
//! The key of record `i` is the 16 lowercase hex digits of FNV-1a-64 of `i`
//! encoded as 8 little-endian bytes (see `docs/workloads.md`). Because the key is a
//! hash, inserting records in record-number order is inserting in random key
//! order.
//!
//! The value of record `i` is 16 printable bytes: the uppercase hex digits of a
//! mix of the key hash. It is a function of the key alone, so any `(key,
//! value)` pair a target hands back can be checked without knowing the record
//! number ([`value_for_key`]).

/// Length of every key in bytes.
pub const KEY_LEN: usize = 16;
/// Length of every value in bytes.
pub const VALUE_LEN: usize = 16;

/// A record key: 16 lowercase hex digits.
pub type Key = [u8; KEY_LEN];
/// A record value: 16 uppercase hex digits.
pub type Value = [u8; VALUE_LEN];

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a, 64-bit.
#[inline]
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = FNV_OFFSET;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// The 64-bit hash whose hex digits are the key of record `i`.
#[inline]
pub fn key_hash(i: u64) -> u64 {
    fnv1a64(&i.to_le_bytes())
}

/// The key of record `i`.
#[inline]
pub fn key(i: u64) -> Key {
    hex16(key_hash(i), b"0123456789abcdef")
}

/// The value of record `i`.
#[inline]
pub fn value(i: u64) -> Value {
    value_for_hash(key_hash(i))
}

/// The value stored under `key`, or `None` if `key` is not a well-formed key
/// (16 lowercase hex digits).
pub fn value_for_key(key: &[u8]) -> Option<Value> {
    parse_hex16(key).map(value_for_hash)
}

#[inline]
fn value_for_hash(h: u64) -> Value {
    // fmix64 from MurmurHash3: a bijection, so distinct keys get distinct values.
    let mut x = h ^ 0x9e37_79b9_7f4a_7c15;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    hex16(x, b"0123456789ABCDEF")
}

#[inline]
pub(crate) fn hex16(x: u64, digits: &[u8; 16]) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (j, o) in out.iter_mut().enumerate() {
        *o = digits[((x >> (60 - 4 * j)) & 0xf) as usize];
    }
    out
}

pub(crate) fn parse_hex16(s: &[u8]) -> Option<u64> {
    if s.len() != 16 {
        return None;
    }
    s.iter().try_fold(0u64, |acc, &c| {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => return None,
        };
        Some(acc << 4 | u64::from(d))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_test_vectors() {
        let vectors: [(u64, &str); 5] = [
            (0, "a8c7f832281a39c5"),
            (1, "89cd31291d2aefa4"),
            (2, "e6bd86443df8ce07"),
            (1_000_000, "0e0a0a27a32b9948"),
            (9_999_999, "b82f43702aac76f0"),
        ];
        for (i, want) in vectors {
            assert_eq!(std::str::from_utf8(&key(i)).unwrap(), want, "record {i}");
        }
    }

    #[test]
    fn values_are_printable_and_derivable_from_keys() {
        for i in (0..100_000).chain([u64::MAX - 1, u64::MAX]) {
            let v = value(i);
            assert!(v.iter().all(|b| b.is_ascii_graphic()), "record {i}");
            assert_eq!(value_for_key(&key(i)), Some(v), "record {i}");
            assert_ne!(&v[..], &key(i)[..]);
        }
        assert_eq!(value_for_key(b"A8C7F832281A39C5"), None);
        assert_eq!(value_for_key(b"a8c7f832281a39c"), None);
    }
}
