//! Global write and read versions with in-order release (Honeycomb 3.2).
//!
//! A write takes its version with a fetch-add on the write version while it
//! holds the leaf lock, does its work, unlocks, then *completes* the version.
//! The read version advances to `v` only when every version `<= v` has
//! completed; a write is acknowledged once the read version has passed it.
//! Completion flags sit in a ring indexed by version; whoever completes the
//! oldest outstanding version advances the read version over every completed
//! successor.
//!
//! A durable store adds a *limit*: the read version never passes the newest
//! version the write-ahead log has made durable, so no reader sees a write
//! before its log record is on disk. Writers still complete their own
//! versions (in any order); the log flusher raises the limit after each
//! fsync. After a log failure the clock is *poisoned*: the limit freezes, so
//! the store stays at its last durable version, and waits give up.

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, Ordering, backoff};

/// Ring slots: bounds the versions in flight (taken but not yet released).
const RING: u64 = 4096;

/// Ring slot of version `v`: consecutive versions (usually different
/// threads') land on different cache lines.
fn slot(v: u64) -> usize {
    const PER_LINE: u64 = 8;
    const LINES: u64 = RING / PER_LINE;
    ((v % LINES) * PER_LINE + (v / LINES) % PER_LINE) as usize
}

#[derive(Debug)]
pub(crate) struct VersionClock {
    /// Last version handed out. Own cache line: every write bumps it.
    write: CachePadded<AtomicU64>,
    /// Every version `<= read` is released. Own cache line: every read loads it.
    read: CachePadded<AtomicU64>,
    /// Slot `v % RING` holds `v` once write `v` has completed.
    done: Box<[AtomicU64]>,
    /// The read version never passes this (u64::MAX: no limit).
    limit: CachePadded<AtomicU64>,
    /// Non-zero after a durability failure: waits give up.
    poisoned: AtomicU64,
}

impl VersionClock {
    /// A clock whose versions `<= start` are all released.
    pub(crate) fn starting_at(start: u64) -> VersionClock {
        VersionClock {
            write: CachePadded::new(AtomicU64::new(start)),
            read: CachePadded::new(AtomicU64::new(start)),
            done: (0..RING).map(|_| AtomicU64::new(u64::MAX)).collect(),
            limit: CachePadded::new(AtomicU64::new(u64::MAX)),
            poisoned: AtomicU64::new(0),
        }
    }

    /// Restarts the clock so that every version `<= v` counts as released
    /// and the next write takes `v + 1`. Recovery replays log records with
    /// their own versions this way; only while nothing else uses the clock.
    pub(crate) fn reset_to(&self, v: u64) {
        debug_assert_eq!(
            self.read.load(Ordering::SeqCst),
            self.write.load(Ordering::SeqCst),
            "reset with writes in flight"
        );
        self.write.store(v, Ordering::SeqCst);
        self.read.store(v, Ordering::SeqCst);
    }

    /// Caps the read version at `v` (`u64::MAX`: no cap). The flusher raises
    /// it as the log becomes durable; it never lowers it.
    pub(crate) fn set_limit(&self, v: u64) {
        self.limit.store(v, Ordering::SeqCst);
        self.advance();
    }

    /// Marks a durability failure: waits for versions not yet released
    /// return false from now on. The flusher stops raising the limit, so
    /// with a limit the store stays at its last durable version.
    pub(crate) fn poison(&self) {
        self.poisoned.store(1, Ordering::SeqCst);
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::SeqCst) != 0
    }

    /// The read version: readers see exactly the writes `<= ` it.
    pub(crate) fn read_version(&self) -> u64 {
        self.read.load(Ordering::Acquire)
    }

    /// The last version handed out (released or not).
    pub(crate) fn write_version(&self) -> u64 {
        self.write.load(Ordering::SeqCst)
    }

    /// Takes the next write version. Call with the leaf lock held.
    pub(crate) fn next(&self) -> u64 {
        self.write.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Marks `v` complete and advances the read version as far as it can.
    /// Never called with a node lock held.
    pub(crate) fn complete(&self, v: u64) {
        let mut round = 0;
        // A slot is reused only after the version it last held is released.
        while v >= self.read.load(Ordering::SeqCst) + RING {
            if self.is_poisoned() {
                // The read version will not move again; nothing waits on `v`.
                return;
            }
            backoff(&mut round);
        }
        self.done[slot(v)].store(v, Ordering::SeqCst);
        self.advance();
    }

    fn advance(&self) {
        loop {
            let r = self.read.load(Ordering::SeqCst);
            let n = r + 1;
            if n > self.limit.load(Ordering::SeqCst)
                || self.done[slot(n)].load(Ordering::SeqCst) != n
            {
                return;
            }
            // Losing the race means someone else advanced; look again.
            let _ = self
                .read
                .compare_exchange(r, n, Ordering::SeqCst, Ordering::SeqCst);
        }
    }

    /// Waits until the read version is `>= v`. False if the clock is
    /// poisoned first (`v` will never be released).
    pub(crate) fn wait_released(&self, v: u64) -> bool {
        let mut round = 0;
        while self.read.load(Ordering::Acquire) < v {
            if self.is_poisoned() {
                return self.read.load(Ordering::Acquire) >= v;
            }
            self.advance();
            backoff(&mut round);
        }
        true
    }

    /// True if version `v` is released.
    pub(crate) fn is_released(&self, v: u64) -> bool {
        self.read.load(Ordering::Acquire) >= v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_a_permutation_of_the_ring() {
        let mut seen = vec![false; RING as usize];
        for v in 0..RING {
            let s = slot(v);
            assert!(!seen[s], "slot {s} reused within one ring");
            seen[s] = true;
        }
        assert_eq!(slot(5), slot(5 + RING));
        assert_ne!(slot(5) / 8, slot(6) / 8, "neighbours share a cache line");
    }

    #[test]
    fn out_of_order_completion_releases_in_order() {
        let c = VersionClock::starting_at(0);
        let (a, b, d) = (c.next(), c.next(), c.next());
        c.complete(d);
        c.complete(b);
        assert_eq!(c.read_version(), 0, "version 1 still outstanding");
        c.complete(a);
        assert_eq!(c.read_version(), 3);
        assert!(c.wait_released(3));
    }

    #[test]
    fn the_limit_holds_back_completed_versions() {
        let c = VersionClock::starting_at(0);
        c.set_limit(1);
        let (a, b) = (c.next(), c.next());
        c.complete(a);
        c.complete(b);
        assert_eq!(c.read_version(), 1, "version 2 is above the limit");
        c.set_limit(2);
        assert_eq!(c.read_version(), 2);
        c.poison();
        let d = c.next();
        c.complete(d);
        assert!(!c.wait_released(d), "a poisoned clock gives up");
    }
}
