//! The statistics counter every layer bumps (`Stats`, memcached's
//! counters): sharded so that event loops do not contend.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// A statistics counter bumped on every request by every event loop:
/// sharded over cache lines so loops on different cores do not contend for
/// one line, summed when read (INFO, stats, metrics).
#[derive(Debug)]
pub struct Counter {
    shards: [crossbeam_utils::CachePadded<AtomicU64>; COUNTER_SHARDS],
}

const COUNTER_SHARDS: usize = 8;

impl Default for Counter {
    fn default() -> Self {
        Counter {
            shards: std::array::from_fn(|_| crossbeam_utils::CachePadded::new(AtomicU64::new(0))),
        }
    }
}

thread_local! {
    /// This thread's shard of every counter.
    static SHARD: usize = {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed) % COUNTER_SHARDS
    };
}

impl Counter {
    pub fn add(&self, n: u64) {
        let i = SHARD.with(|s| *s);
        self.shards[i].fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.shards.iter().map(|s| s.load(Ordering::Relaxed)).sum()
    }

    pub fn reset(&self) {
        for s in &self.shards {
            s.store(0, Ordering::Relaxed);
        }
    }
}
