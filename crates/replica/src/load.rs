//! How busy a range is, for splits by load: every replica counts the write
//! ops its group applies and keeps a sample of their keys; once a second
//! the range's leader reads and clears the count (`Host::split_busy`), and
//! a range whose writes stay above the `split_load` setting for a few
//! seconds splits at the middle of its sampled keys, so that each half
//! takes about half the writes. Reads are served by every replica, mostly
//! without its group, and are not counted.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::time::Instant;

/// One key in this many is sampled.
const SAMPLE_EVERY: u64 = 16;
/// The sample keeps at most this many keys (the newest replace the oldest).
const MAX_SAMPLES: usize = 256;

/// A range's writes since its leader last looked.
#[derive(Debug)]
pub(crate) struct Load {
    ops: AtomicU64,
    samples: Mutex<Vec<Vec<u8>>>,
    /// When the count was last taken, and for how many takes in a row the
    /// rate has been above the setting.
    taken: Mutex<(Instant, u32)>,
}

impl Default for Load {
    fn default() -> Load {
        Load {
            ops: AtomicU64::new(0),
            samples: Mutex::new(Vec::new()),
            taken: Mutex::new((Instant::now(), 0)),
        }
    }
}

impl Load {
    /// Counts one write op of `key`.
    pub(crate) fn note(&self, key: &[u8]) {
        let n = self.ops.fetch_add(1, Ordering::Relaxed);
        if n.is_multiple_of(SAMPLE_EVERY) {
            let mut s = self.samples.lock();
            let slot = (n / SAMPLE_EVERY) as usize % MAX_SAMPLES;
            if s.len() < MAX_SAMPLES {
                s.push(key.to_vec());
            } else {
                s[slot] = key.to_vec();
            }
        }
    }

    /// Takes the count since the last take: the writes per second, and how
    /// many takes in a row (this one included) have been at or above
    /// `limit` writes per second. The sample is cleared when the rate falls
    /// below `limit`.
    pub(crate) fn take(&self, limit: u64) -> (u64, u32) {
        let ops = self.ops.swap(0, Ordering::Relaxed);
        let mut taken = self.taken.lock();
        let secs = taken.0.elapsed().as_secs_f64().max(1e-3);
        let rate = (ops as f64 / secs) as u64;
        taken.0 = Instant::now();
        if rate >= limit {
            taken.1 += 1;
        } else {
            taken.1 = 0;
            self.samples.lock().clear();
        }
        (rate, taken.1)
    }

    /// The key in the middle of the sample (in key order) that lies
    /// strictly inside `[start, end)`: where a split gives each half about
    /// half the writes. None while the sample holds fewer than 16 keys, or
    /// none inside.
    pub(crate) fn middle(&self, start: &[u8], end: Option<&[u8]>) -> Option<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = self
            .samples
            .lock()
            .iter()
            .filter(|k| k.as_slice() > start && end.is_none_or(|e| k.as_slice() < e))
            .cloned()
            .collect();
        if keys.len() < 16 {
            return None;
        }
        keys.sort_unstable();
        Some(keys.swap_remove(keys.len() / 2))
    }

    /// Starts afresh (after a split: the halves count on their own).
    pub(crate) fn reset(&self) {
        self.ops.store(0, Ordering::Relaxed);
        self.samples.lock().clear();
        *self.taken.lock() = (Instant::now(), 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The middle of the sample halves the writes: keys written evenly
    /// from k000 to k199 split near k100, only inside the bounds, and not
    /// on a sample too small to tell.
    #[test]
    fn the_middle_key_halves_the_sampled_writes() {
        let load = Load::default();
        for round in 0..4 {
            for i in 0..200 {
                load.note(format!("k{:03}", (i * 7 + round) % 200).as_bytes());
            }
        }
        let at = load.middle(b"", None).unwrap();
        assert!(
            at.as_slice() > b"k080".as_slice() && at.as_slice() < b"k120".as_slice(),
            "{}",
            String::from_utf8_lossy(&at)
        );
        let right = load.middle(b"k150", None).unwrap_or_default();
        assert!(right.is_empty() || right.as_slice() > b"k150".as_slice());
        let few = Load::default();
        for i in 0..100 {
            few.note(format!("k{i:03}").as_bytes());
        }
        assert_eq!(few.middle(b"", None), None, "7 samples");
    }
}
