//! Hybrid logical clock timestamps: what item versions become once the
//! keyspace is cut into ranges, so that a read crossing ranges can take one
//! timestamp and read every range at it.
//!
//! A timestamp is one `u64`: unix milliseconds in the high 48 bits, a
//! logical counter in the low 16. Ordered as integers, it follows the wall
//! clock where the clock moves and counts where it does not (or goes back):
//! a clock never hands out a timestamp at or below one it has handed out or
//! seen. Seeing another node's timestamp (a reply, a log entry) moves this
//! clock past it, so that anything acknowledged before a read began has a
//! timestamp below the one the read takes on any node that saw it.
//!
//! A range's leader takes a write's timestamp from its clock after it has
//! [`Clock::observe`]d the highest timestamp it served a read at (its read
//! floor), so no later write lands at or below a read already served.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Bits of a timestamp that count within one millisecond.
pub const LOGICAL_BITS: u32 = 16;

/// A hybrid logical clock timestamp (see the module's docs).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The timestamp at the start of unix millisecond `ms`.
    pub fn from_millis(ms: u64) -> Timestamp {
        Timestamp(ms << LOGICAL_BITS)
    }

    /// Its unix milliseconds.
    pub fn millis(self) -> u64 {
        self.0 >> LOGICAL_BITS
    }

    /// Its count within the millisecond.
    pub fn logical(self) -> u64 {
        self.0 & ((1 << LOGICAL_BITS) - 1)
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.millis(), self.logical())
    }
}

/// The timestamp a read across ranges that starts now reads at: the end
/// of the wall clock's current millisecond. Every version visible now has
/// a millisecond at or below the wall clock's (the commit wait), so every
/// write acknowledged, or seen, before now lies at or below it.
/// Never below one handed out before in this process: a wall clock
/// stepped back does not send a read that starts after another finished
/// to an earlier timestamp.
pub fn read_timestamp() -> Timestamp {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let at = Timestamp::from_millis(ms).0 | ((1 << LOGICAL_BITS) - 1);
    Timestamp(LAST.fetch_max(at, Ordering::AcqRel).max(at))
}

/// A node's (or a range leader's) clock. Shared between threads: every
/// [`Clock::now`] is above every timestamp handed out or observed before
/// it, on any thread.
#[derive(Debug, Default)]
pub struct Clock {
    last: AtomicU64,
}

impl Clock {
    /// A clock that has handed out nothing and seen nothing.
    pub fn new() -> Clock {
        Clock::default()
    }

    /// A new timestamp at wall time `wall_ms`: the start of that
    /// millisecond if the clock has not passed it, else one above the last
    /// timestamp handed out or seen. More than 65,536 timestamps in one
    /// millisecond carry into the next, which only runs the clock ahead of
    /// the wall for as long as the burst lasts.
    pub fn now(&self, wall_ms: u64) -> Timestamp {
        let wall = Timestamp::from_millis(wall_ms).0;
        let mut last = self.last.load(Ordering::Acquire);
        loop {
            let next = wall.max(last + 1);
            match self
                .last
                .compare_exchange_weak(last, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Timestamp(next),
                Err(seen) => last = seen,
            }
        }
    }

    /// Moves the clock to at least `ts` (seen in a reply, a log entry, or a
    /// read served at it): every later [`Clock::now`] is above it.
    pub fn observe(&self, ts: Timestamp) {
        self.last.fetch_max(ts.0, Ordering::AcqRel);
    }

    /// The last timestamp handed out or observed.
    pub fn last(&self) -> Timestamp {
        Timestamp(self.last.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timestamp_splits_into_millis_and_a_count() {
        let t = Timestamp((1_700_000_000_123 << 16) | 7);
        assert_eq!((t.millis(), t.logical()), (1_700_000_000_123, 7));
        assert_eq!(t.to_string(), "1700000000123.7");
        assert_eq!(Timestamp::from_millis(5).0, 5 << 16);
    }

    #[test]
    fn the_clock_follows_the_wall_and_counts_where_it_stands_still() {
        let c = Clock::new();
        assert_eq!(c.now(10), Timestamp::from_millis(10));
        assert_eq!(c.now(10), Timestamp(Timestamp::from_millis(10).0 + 1));
        // The wall went back: the clock does not.
        assert_eq!(c.now(9), Timestamp(Timestamp::from_millis(10).0 + 2));
        assert_eq!(c.now(11), Timestamp::from_millis(11));
    }

    #[test]
    fn an_observed_timestamp_is_passed_by_the_next() {
        let c = Clock::new();
        c.now(10);
        let seen = Timestamp(Timestamp::from_millis(50).0 + 3);
        c.observe(seen);
        // An older one moves nothing.
        c.observe(Timestamp::from_millis(20));
        assert_eq!(c.last(), seen);
        assert_eq!(c.now(10), Timestamp(seen.0 + 1));
    }

    #[test]
    fn a_burst_past_the_logical_bits_carries_into_the_next_millisecond() {
        let c = Clock::new();
        let mut last = c.now(1);
        for _ in 0..(1 << LOGICAL_BITS) {
            let t = c.now(1);
            assert!(t > last);
            last = t;
        }
        assert_eq!(last.millis(), 2);
        // The wall catching up past it starts counting afresh.
        assert_eq!(c.now(3), Timestamp::from_millis(3));
    }

    #[test]
    fn threads_never_get_the_same_timestamp() {
        let c = std::sync::Arc::new(Clock::new());
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let c = std::sync::Arc::clone(&c);
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    for i in 0..10_000u64 {
                        if i % 100 == 0 {
                            c.observe(Timestamp::from_millis(i / 100 + t));
                        }
                        got.push(c.now(i / 1000));
                    }
                    // Increasing on each thread.
                    assert!(got.windows(2).all(|w| w[0] < w[1]));
                    got
                })
            })
            .collect();
        let mut all: Vec<Timestamp> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
    }
}
