//! Records of any size: keys padded to `--key-size`, values of
//! `--value-size` carrying an update counter.
//!
//! The key of record `i` starts with [`keys::key`]`(i)` (16 hex digits of the
//! key hash); a longer key continues with a fixed printable suffix, so keys
//! stay unique. With a size range `a..b` each record gets one length, drawn
//! uniformly from the multiples of 8 in the range by its key hash.
//!
//! The value of a key at update counter `c` is a function of the key hash and
//! `c` alone: its first 8 bytes are the hex digits of `c` masked with a mix of
//! the key hash, the rest are hex digits of a mix of both, and its length is
//! drawn from the value size range by the same mix. A reader decodes `c` from
//! any value it gets, regenerates the value and compares, so a value of
//! another key, a torn value or a value of the wrong length all fail.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::keys::{self, KEY_LEN, hex16, parse_hex16};

/// Longest key the bench generates (a bound on the per-thread key buffers).
pub const KEY_SIZE_MAX: usize = 1024;
/// Longest value the bench generates (a bound on the per-thread value buffers).
pub const VALUE_SIZE_MAX: usize = 1 << 20;
/// Shortest value: the 8 bytes that carry the update counter.
pub const VALUE_SIZE_MIN: usize = 8;

/// The printable bytes that pad keys longer than 16 bytes, repeated.
const KEY_PAD: &[u8; 16] = b"-combkv-padding-";

/// A size or a range of sizes in bytes: `A` or `A..B`, multiples of 8, `A <= B`
/// (both ends included).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeRange {
    /// Smallest size.
    pub min: usize,
    /// Largest size.
    pub max: usize,
}

impl SizeRange {
    /// One fixed size.
    pub const fn fixed(size: usize) -> Self {
        SizeRange {
            min: size,
            max: size,
        }
    }

    /// How many sizes the range holds.
    fn steps(self) -> u64 {
        ((self.max - self.min) / 8 + 1) as u64
    }

    /// The size picked by `mix` (uniform over the range's multiples of 8).
    #[inline]
    pub fn pick(self, mix: u64) -> usize {
        if self.min == self.max {
            self.min
        } else {
            self.min + 8 * (mix % self.steps()) as usize
        }
    }

    /// Mean size over the range.
    pub fn mean(self) -> f64 {
        (self.min + self.max) as f64 / 2.0
    }

    /// Whether `len` is one of the range's sizes.
    pub fn holds(self, len: usize) -> bool {
        (self.min..=self.max).contains(&len) && (len - self.min).is_multiple_of(8)
    }
}

impl fmt::Display for SizeRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{}", self.min)
        } else {
            write!(f, "{}..{}", self.min, self.max)
        }
    }
}

impl FromStr for SizeRange {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let num = |t: &str| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| format!("bad size {t:?} in {s:?} (want A or A..B, in bytes)"))
        };
        let (min, max) = match s.split_once("..") {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(s)?, num(s)?),
        };
        if min % 8 != 0 || max % 8 != 0 {
            return Err(format!("sizes must be multiples of 8, got {s:?}"));
        }
        if min > max {
            return Err(format!("empty size range {s:?}"));
        }
        Ok(SizeRange { min, max })
    }
}

/// How records are shaped: key and value size ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    /// Key sizes (at least 16).
    pub key_size: SizeRange,
    /// Value sizes (at least 8).
    pub value_size: SizeRange,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            key_size: SizeRange::fixed(KEY_LEN),
            value_size: SizeRange::fixed(16),
        }
    }
}

/// fmix64 from MurmurHash3: a bijection with good avalanche.
#[inline]
pub fn fmix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x
}

const UPPER: &[u8; 16] = b"0123456789ABCDEF";
const LOWER: &[u8; 16] = b"0123456789abcdef";

/// The mix of the key hash that masks the counter and seeds the value.
#[inline]
fn key_mix(h: u64) -> u64 {
    fmix64(h ^ 0x5bd1_e995_c0de_cafe)
}

impl Shape {
    /// Checks the size limits.
    pub fn validate(&self) -> Result<(), String> {
        if self.key_size.min < KEY_LEN || self.key_size.max > KEY_SIZE_MAX {
            return Err(format!(
                "key sizes must lie in {KEY_LEN}..={KEY_SIZE_MAX} (a key starts with 16 hex digits), got {}",
                self.key_size
            ));
        }
        if self.value_size.min < VALUE_SIZE_MIN || self.value_size.max > VALUE_SIZE_MAX {
            return Err(format!(
                "value sizes must lie in {VALUE_SIZE_MIN}..={VALUE_SIZE_MAX}, got {}",
                self.value_size
            ));
        }
        Ok(())
    }

    /// Length of the key whose hash is `h`.
    #[inline]
    fn key_len(&self, h: u64) -> usize {
        self.key_size.pick(fmix64(h))
    }

    /// Writes the key of record `i` into `out` (cleared first); returns its hash.
    #[inline]
    pub fn key_into(&self, i: u64, out: &mut Vec<u8>) -> u64 {
        let h = keys::key_hash(i);
        self.key_for_hash(h, out);
        h
    }

    /// Writes the key whose hash is `h` into `out` (cleared first).
    #[inline]
    pub fn key_for_hash(&self, h: u64, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&hex16(h, LOWER));
        let len = self.key_len(h);
        out.extend((0..len - KEY_LEN).map(|j| KEY_PAD[j % KEY_PAD.len()]));
    }

    /// The key hash of a well-formed key, or `None`.
    pub fn parse_key(&self, key: &[u8]) -> Option<u64> {
        let h = parse_hex16(key.get(..KEY_LEN)?)?;
        let ok = key.len() == self.key_len(h)
            && key[KEY_LEN..]
                .iter()
                .enumerate()
                .all(|(j, &b)| b == KEY_PAD[j % KEY_PAD.len()]);
        ok.then_some(h)
    }

    /// Writes the value of the key with hash `h` at update counter `c` into
    /// `out` (cleared first).
    #[inline]
    pub fn value_into(&self, h: u64, c: u32, out: &mut Vec<u8>) {
        out.clear();
        let m = key_mix(h);
        let seed = fmix64(m ^ u64::from(c).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let len = self.value_size.pick(seed);
        let head = hex16(u64::from(c ^ m as u32), UPPER);
        out.extend_from_slice(&head[8..]);
        let mut x = seed;
        while out.len() < len {
            x = fmix64(x.wrapping_add(0x9e37_79b9_7f4a_7c15));
            let chunk = hex16(x, UPPER);
            let take = (len - out.len()).min(chunk.len());
            out.extend_from_slice(&chunk[..take]);
        }
    }

    /// Decodes the update counter from `value` of the key with hash `h` and
    /// checks that `value` is exactly the value at that counter; `scratch` is
    /// a reusable buffer. `None`: the value is not one this key ever has.
    pub fn decode_value(&self, h: u64, value: &[u8], scratch: &mut Vec<u8>) -> Option<u32> {
        let head = value.get(..8)?;
        let mut padded = [b'0'; 16];
        padded[8..].copy_from_slice(head);
        // Values use uppercase digits; parse_hex16 reads lowercase.
        padded.make_ascii_lowercase();
        let c = parse_hex16(&padded)? as u32 ^ key_mix(h) as u32;
        self.value_into(h, c, scratch);
        (scratch[..] == *value).then_some(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!("16".parse::<SizeRange>(), Ok(SizeRange::fixed(16)));
        assert_eq!(
            "16..64".parse::<SizeRange>(),
            Ok(SizeRange { min: 16, max: 64 })
        );
        assert!("17".parse::<SizeRange>().is_err());
        assert!("64..16".parse::<SizeRange>().is_err());
        assert!("x..8".parse::<SizeRange>().is_err());
        let bad_key = Shape {
            key_size: SizeRange::fixed(8),
            ..Shape::default()
        };
        assert!(bad_key.validate().is_err());
    }

    #[test]
    fn default_keys_are_the_workload_keys() {
        let shape = Shape::default();
        let mut k = Vec::new();
        for i in [0, 1, 2, 1_000_000, 9_999_999] {
            shape.key_into(i, &mut k);
            assert_eq!(k[..], keys::key(i));
        }
    }

    #[test]
    fn keys_and_values_round_trip_at_every_size() {
        let shape = Shape {
            key_size: "16..48".parse().unwrap(),
            value_size: "8..40".parse().unwrap(),
        };
        let (mut k, mut v, mut scratch) = (Vec::new(), Vec::new(), Vec::new());
        let mut key_lens = std::collections::BTreeSet::new();
        let mut value_lens = std::collections::BTreeSet::new();
        for i in 0..2000u64 {
            let h = shape.key_into(i, &mut k);
            key_lens.insert(k.len());
            assert!(k.iter().all(u8::is_ascii_graphic));
            assert_eq!(shape.parse_key(&k), Some(h));
            for c in [0, 1, 7, u32::MAX] {
                shape.value_into(h, c, &mut v);
                value_lens.insert(v.len());
                assert!(shape.value_size.holds(v.len()));
                assert!(v.iter().all(u8::is_ascii_graphic));
                assert_eq!(shape.decode_value(h, &v, &mut scratch), Some(c));
            }
            // Another key's value, a torn value, a longer value: all refused.
            // (An 8-byte value is all counter: another key's decodes to some
            // far-off counter, which the model's window then refuses.)
            shape.value_into(keys::key_hash(i + 1), 0, &mut v);
            let foreign = shape.decode_value(h, &v, &mut scratch);
            assert!(foreign.is_none() || (v.len() == 8 && foreign != Some(0)));
            shape.value_into(h, 3, &mut v);
            v.pop();
            assert_eq!(shape.decode_value(h, &v, &mut scratch), None);
            v.extend_from_slice(b"XX");
            assert_eq!(shape.decode_value(h, &v, &mut scratch), None);
        }
        assert_eq!(
            key_lens.into_iter().collect::<Vec<_>>(),
            [16, 24, 32, 40, 48]
        );
        assert_eq!(
            value_lens.into_iter().collect::<Vec<_>>(),
            [8, 16, 24, 32, 40]
        );
        k.push(b'x');
        assert_eq!(shape.parse_key(&k), None);
    }
}
