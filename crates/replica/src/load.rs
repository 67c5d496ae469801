//! How busy a range is, for splits by load: every replica counts the write
//! ops its group applies and the reads it serves (the server tells it,
//! `Replica::note_reads`), and keeps a sample of their keys; once a second
//! each node takes its replicas' counts (`Host::split_busy`), and the
//! leader of a range whose requests stay above the `split_load` setting
//! for a few seconds splits it at the middle of its sampled keys, so that
//! each half takes about half of them. Writes are counted on every replica
//! alike; reads only where they are served, so the leader sees the reads
//! served at its node (and those other nodes send it).

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
    /// Off where splits by load are (the default): nothing is counted, so
    /// the apply loop and the reads pay nothing for them.
    on: bool,
    ops: AtomicU64,
    samples: Mutex<Vec<Vec<u8>>>,
    /// When the count was last taken, and for how many takes in a row the
    /// rate has been above the setting.
    taken: Mutex<(Instant, u32)>,
    /// The rate the last take found (merges leave busy ranges alone).
    rate: AtomicU64,
}

impl Default for Load {
    fn default() -> Load {
        Load {
            on: true,
            ops: AtomicU64::new(0),
            samples: Mutex::new(Vec::new()),
            taken: Mutex::new((Instant::now(), 0)),
            rate: AtomicU64::new(0),
        }
    }
}

impl Load {
    /// A load that counts nothing.
    pub(crate) fn off() -> Load {
        Load {
            on: false,
            ..Load::default()
        }
    }

    /// Whether it counts (splits by load are on).
    pub(crate) fn counting(&self) -> bool {
        self.on
    }

    /// Counts one write op of `key`.
    pub(crate) fn note(&self, key: &[u8]) {
        self.note_many(1, key);
    }

    /// Counts `n` requests, of which `key` is one (or near them all: a
    /// batch's first key).
    pub(crate) fn note_many(&self, n: u64, key: &[u8]) {
        if !self.on || n == 0 {
            return;
        }
        let before = self.ops.fetch_add(n, Ordering::Relaxed);
        // A sample each time the count passes a multiple of SAMPLE_EVERY.
        if before.is_multiple_of(SAMPLE_EVERY)
            || before / SAMPLE_EVERY != (before + n - 1) / SAMPLE_EVERY
        {
            let mut s = self.samples.lock();
            let slot = (before / SAMPLE_EVERY) as usize % MAX_SAMPLES;
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
        self.rate.store(rate, Ordering::Relaxed);
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

    /// The rate the last take found (0 before the first).
    pub(crate) fn rate(&self) -> u64 {
        self.rate.load(Ordering::Relaxed)
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

    /// A batch of reads counts each read and samples as often as single
    /// requests would: one key per 16 counted.
    #[test]
    fn a_batch_counts_every_read_and_is_sampled_alike() {
        let load = Load::default();
        for i in 0..64 {
            load.note_many(5, format!("k{i:03}").as_bytes());
        }
        assert_eq!(load.ops.load(Ordering::Relaxed), 320);
        assert_eq!(load.samples.lock().len(), 20, "320 / 16");
        let (rate, busy) = load.take(1);
        assert!(rate > 0 && busy == 1);
        assert_eq!(load.ops.load(Ordering::Relaxed), 0);
    }
}
