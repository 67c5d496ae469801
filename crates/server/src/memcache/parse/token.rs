//! The pieces a request line is made of: memcached's tokenizer, its
//! numbers (as `safe_strto*` reads them) and the base64 keys of meta
//! commands with the `b` flag.

use super::{DECODED_KEY_MAX, Key, MAX_TOKENS, MEMCACHED_MAX_KEY};

/// Space-separated words of a line (memcached splits on spaces only).
pub fn words(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|&b| b == b' ').filter(|w| !w.is_empty())
}

/// The keys of a retrieval request, in order.
pub fn keys(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    words(line)
}

/// The first tokens of a line, as memcached's tokenizer splits them.
pub(super) struct Tokens<'a> {
    pub(super) t: [&'a [u8]; MAX_TOKENS],
    /// Real tokens (at most `MAX_TOKENS - 1`).
    n: usize,
}

impl<'a> Tokens<'a> {
    pub(super) fn split(line: &'a [u8]) -> Tokens<'a> {
        let mut t: [&[u8]; MAX_TOKENS] = [&[]; MAX_TOKENS];
        let mut n = 0;
        for w in words(line) {
            if n == MAX_TOKENS - 1 {
                break;
            }
            t[n] = w;
            n += 1;
        }
        Tokens { t, n }
    }

    /// memcached's `ntokens`: real tokens plus the terminal one.
    pub(super) fn ntokens(&self) -> usize {
        self.n + 1
    }

    pub(super) fn last(&self) -> &'a [u8] {
        if self.n == 0 { &[] } else { self.t[self.n - 1] }
    }
}

/// The part of `line` after its first `skip` words.
pub(super) fn after_words(line: &[u8], skip: usize) -> &[u8] {
    let mut at = 0;
    for _ in 0..skip {
        while at < line.len() && line[at] == b' ' {
            at += 1;
        }
        while at < line.len() && line[at] != b' ' {
            at += 1;
        }
    }
    &line[at..]
}

// ---- numbers, as memcached's safe_strto* read them ---------------------------

/// C's `isspace`.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// A 64-bit unsigned token (`safe_strtoull`).
/// The engine reads a stored number for `incr` the same way.
pub fn parse_u64(s: &[u8]) -> Option<u64> {
    combkv::op::parse_unsigned(s)
}

/// A 32-bit unsigned token (`safe_strtoul`; larger values are refused
/// rather than truncated).
pub fn parse_u32(s: &[u8]) -> Option<u32> {
    parse_u64(s).and_then(|v| u32::try_from(v).ok())
}

/// A 32-bit signed token (`safe_strtol`).
pub fn parse_i32(s: &[u8]) -> Option<i32> {
    let mut i = 0;
    while i < s.len() && is_c_space(s[i]) {
        i += 1;
    }
    let mut neg = false;
    if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
        neg = s[i] == b'-';
        i += 1;
    }
    let start = i;
    let mut v: i64 = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        v = v * 10 + i64::from(s[i] - b'0');
        if v > i64::from(u32::MAX) {
            return None;
        }
        i += 1;
    }
    if i == start || (i < s.len() && !is_c_space(s[i])) {
        return None;
    }
    i32::try_from(if neg { -v } else { v }).ok()
}

// ---- base64 (keys of meta commands with the `b` flag) ------------------------

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn b64_value(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// Decodes a padded base64 key; None if it is not valid base64 or decodes
/// to nothing.
pub(super) fn decode_key(raw: &[u8]) -> Option<Key<'_>> {
    if raw.is_empty() || !raw.len().is_multiple_of(4) || raw.len() > MEMCACHED_MAX_KEY + 2 {
        return None;
    }
    let mut buf = [0u8; DECODED_KEY_MAX];
    let mut n = 0;
    for (ci, chunk) in raw.chunks(4).enumerate() {
        let last = (ci + 1) * 4 == raw.len();
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut acc: u32 = 0;
        for &c in &chunk[..4 - pad] {
            acc = (acc << 6) | u32::from(b64_value(c)?);
        }
        acc <<= 6 * pad as u32;
        let bytes = [(acc >> 16) as u8, (acc >> 8) as u8, acc as u8];
        for &b in &bytes[..3 - pad] {
            buf[n] = b;
            n += 1;
        }
    }
    if n == 0 {
        return None;
    }
    Some(Key {
        raw,
        decoded: Some((buf, n as u8)),
    })
}

/// Appends the padded base64 encoding of `bytes`.
pub fn encode_base64(bytes: &[u8], out: &mut Vec<u8>) {
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let acc = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[((acc >> (18 - 6 * i)) & 63) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_memcached_reads_them() {
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"-0"), Some(0));
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u64(b"+7"), Some(7));
        assert_eq!(parse_u64(b"12 junk"), Some(12));
        assert_eq!(parse_u64(b"12x"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_i32(b"-1"), Some(-1));
        assert_eq!(parse_i32(b"2147483648"), None);
        assert_eq!(parse_i32(b"99999999999999999999"), None);
        assert_eq!(parse_u32(b"4294967296"), None);
    }

    #[test]
    fn base64_round_trip() {
        for key in [&b"a"[..], b"ab", b"abc", b"\x00\xff\x10key"] {
            let mut enc = Vec::new();
            encode_base64(key, &mut enc);
            let k = decode_key(&enc).expect("decodes");
            assert_eq!(k.bytes(), key);
        }
        assert!(decode_key(b"a===").is_none());
        assert!(decode_key(b"ab=c").is_none());
        assert!(decode_key(b"abc").is_none());
    }
}
