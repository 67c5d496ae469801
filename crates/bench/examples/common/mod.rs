//! What the figure examples share: the bench's key function
//! (`docs/workloads.md`) and a small deterministic generator for uniform
//! draws.

pub use combkv_bench::keys::key;

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
