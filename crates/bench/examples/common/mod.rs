//! What the figure examples share: WORKLOADS.md's key function and a small
//! deterministic generator for uniform draws.

/// Key of record `i`: 16 hex digits of an FNV-1a hash of `i` (uniform over
/// the key space, printable).
pub fn key(i: u64) -> [u8; 16] {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in i.to_le_bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let mut out = [0u8; 16];
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (j, o) in out.iter_mut().enumerate() {
        *o = HEX[((h >> (60 - 4 * j)) & 15) as usize];
    }
    out
}

/// xorshift64: uniform draws, the same sequence for the same seed.
pub struct Rng(pub u64);

impl Rng {
    /// A draw in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
