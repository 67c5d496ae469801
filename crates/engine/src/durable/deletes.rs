//! The keys deleted since the last checkpoint, for delta runs.
//!
//! A log merge, split or node merge drops delete markers, so a leaf
//! rewritten since the last checkpoint no longer says which of its keys
//! were deleted. The log says it: every logged delete passes through
//! `Wal::next_version`, which records its key here in version order. With
//! the keys of every delete between two checkpoints at hand, a delta run
//! writes only the changed keys of every leaf, rewritten or not (and a
//! delete for each recorded key absent at the run's version).
//!
//! Some deletes are not here: a clear's (unlogged: its CLEAR record covers
//! them), and those dropped when the record outgrows its bound. Either
//! marks the deletes up to that version lost; a run from a version at or
//! below it falls back to whole leaves for rewritten ones
//! (`LeafDelta::Range`).

use std::collections::VecDeque;

use parking_lot::Mutex;

/// Key bytes kept before the record gives up (and runs fall back to whole
/// rewritten leaves until a checkpoint passes the loss).
const MAX_BYTES: usize = 64 << 20;

#[derive(Debug, Default)]
struct Inner {
    /// (version, key), versions ascending.
    entries: VecDeque<(u64, Box<[u8]>)>,
    bytes: usize,
    /// Deletes at versions up to this one may be missing.
    lost_upto: u64,
}

/// The record of deleted keys (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct DeleteLog {
    inner: Mutex<Inner>,
}

impl DeleteLog {
    /// A delete of `key` at version `v` (above every one recorded before).
    pub(crate) fn record(&self, v: u64, key: &[u8]) {
        let mut i = self.inner.lock();
        if i.bytes + key.len() > MAX_BYTES {
            i.entries.clear();
            i.bytes = 0;
            i.lost_upto = v;
            return;
        }
        i.bytes += key.len();
        i.entries.push_back((v, key.into()));
    }

    /// Deletes up to version `v` are unknown from here on (a clear's, whose
    /// own deletes take versions after `v` but finish before any checkpoint
    /// can take a version above `v`).
    pub(crate) fn lose_upto(&self, v: u64) {
        let mut i = self.inner.lock();
        i.entries.clear();
        i.bytes = 0;
        i.lost_upto = i.lost_upto.max(v);
    }

    /// The keys deleted at versions in `(since, to]`, sorted and without
    /// repeats; None if some may be missing.
    pub(crate) fn between(&self, since: u64, to: u64) -> Option<Vec<Vec<u8>>> {
        let i = self.inner.lock();
        if i.lost_upto >= since {
            return None;
        }
        let mut keys: Vec<Vec<u8>> = i
            .entries
            .iter()
            .filter(|(v, _)| *v > since && *v <= to)
            .map(|(_, k)| k.to_vec())
            .collect();
        drop(i);
        keys.sort_unstable();
        keys.dedup();
        Some(keys)
    }

    /// Forgets the deletes at versions up to `v` (a checkpoint at `v` is
    /// durable: no later run starts below it).
    pub(crate) fn forget_upto(&self, v: u64) {
        let mut i = self.inner.lock();
        while let Some((ver, k)) = i.entries.front()
            && *ver <= v
        {
            let len = k.len();
            i.entries.pop_front();
            i.bytes -= len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_between_two_versions_sorted_once_and_lost_after_a_clear() {
        let d = DeleteLog::default();
        d.record(3, b"b");
        d.record(5, b"a");
        d.record(7, b"b");
        d.record(9, b"c");
        assert_eq!(d.between(2, 8), Some(vec![b"a".to_vec(), b"b".to_vec()]));
        assert_eq!(d.between(5, 9), Some(vec![b"b".to_vec(), b"c".to_vec()]));
        d.forget_upto(7);
        assert_eq!(d.between(7, 9), Some(vec![b"c".to_vec()]));
        d.lose_upto(10);
        assert_eq!(d.between(9, 20), None, "the clear's deletes are unknown");
        assert_eq!(d.between(10, 20), None);
        d.record(12, b"d");
        assert_eq!(d.between(11, 20), Some(vec![b"d".to_vec()]));
    }
}
