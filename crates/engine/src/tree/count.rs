//! A counter that every writing thread updates: sharded over cache lines so
//! that writers on different cores do not contend for one line, summed on
//! read. The key count and the bytes of out-of-line values use it.

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicI64, Ordering};

const SHARDS: usize = 16;

#[derive(Debug)]
pub(crate) struct ShardedCount {
    shards: [CachePadded<AtomicI64>; SHARDS],
}

impl Default for ShardedCount {
    fn default() -> Self {
        ShardedCount {
            shards: std::array::from_fn(|_| CachePadded::new(AtomicI64::new(0))),
        }
    }
}

impl ShardedCount {
    /// Adds `delta` (negative to take away) on this thread's shard.
    #[inline]
    pub(crate) fn add(&self, delta: i64) {
        if delta == 0 {
            return;
        }
        thread_local! {
            static SHARD: usize = {
                use std::hash::{BuildHasher, RandomState};
                RandomState::new().hash_one(std::thread::current().id()) as usize % SHARDS
            };
        }
        let shard = SHARD.with(|s| *s);
        self.shards[shard].fetch_add(delta, Ordering::Relaxed);
    }

    /// The sum (0 if the shards, read one by one while writers go on, add
    /// up below it); exact once writers are quiescent.
    pub(crate) fn get(&self) -> u64 {
        let sum: i64 = self.shards.iter().map(|s| s.load(Ordering::Relaxed)).sum();
        sum.max(0) as u64
    }
}
