//! A fixed-bucket histogram of durations, for what is rare enough to time
//! one by one (an fsync per group commit, a checkpoint, a merge, a Raft
//! proposal): an `Instant` pair per event and two relaxed atomic adds.
//! The engine knows nothing of Prometheus; a [`HistogramSnapshot`] holds
//! what an exposition needs (each bucket's count, the sum, the count).
//!
//! Its atomics are std's, not `crate::sync`'s: it is written by the
//! durability layer's own threads and by the replica crate, neither of
//! which runs under shuttle, and read only for statistics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The finite buckets' upper bounds (inclusive) in nanoseconds: 1, 2.5, 5
/// per decade from 10 us (a fast fdatasync) to 500 s (a checkpoint of a
/// large store). Longer goes to the last, unbounded bucket.
const BOUNDS_NS: [u64; 24] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
    25_000_000_000,
    50_000_000_000,
    100_000_000_000,
    250_000_000_000,
    500_000_000_000,
];

/// Buckets: one per bound, and the unbounded one after them.
const BUCKETS: usize = BOUNDS_NS.len() + 1;

/// Durations counted into fixed buckets, lock-free; see the module's
/// documentation.
#[derive(Debug)]
pub struct DurationHistogram {
    /// Observations per bucket (not cumulative).
    counts: [AtomicU64; BUCKETS],
    /// The sum of every observation, in nanoseconds (wraps after 584 years
    /// of summed time).
    sum_ns: AtomicU64,
}

impl Default for DurationHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl DurationHistogram {
    /// An empty histogram.
    pub const fn new() -> DurationHistogram {
        DurationHistogram {
            counts: [const { AtomicU64::new(0) }; BUCKETS],
            sum_ns: AtomicU64::new(0),
        }
    }

    /// Counts one event that took `d`.
    pub fn observe(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // The first bucket whose bound is at or above `ns` (a bound is
        // inclusive, as Prometheus's `le`); past the last bound, the
        // unbounded bucket.
        let i = BOUNDS_NS.partition_point(|&b| b < ns);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The figures now. Relaxed reads: an event counted during the read may
    /// be in the buckets and not yet in the sum, which a scrape tolerates;
    /// the count is the buckets' total, so those two always agree.
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            counts: std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed)),
            sum: Duration::from_nanos(self.sum_ns.load(Ordering::Relaxed)),
        }
    }
}

/// A [`DurationHistogram`]'s figures at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    counts: [u64; BUCKETS],
    sum: Duration,
}

impl HistogramSnapshot {
    /// Events counted.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Their durations summed.
    pub fn sum(&self) -> Duration {
        self.sum
    }

    /// Every bucket in order, with its upper bound (inclusive; `None` for
    /// the last, unbounded one) and the events in it alone (not
    /// cumulative).
    pub fn buckets(&self) -> impl Iterator<Item = (Option<Duration>, u64)> + '_ {
        let bounds = BOUNDS_NS.iter().map(|&b| Some(Duration::from_nanos(b)));
        bounds.chain([None]).zip(self.counts.iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(s: &HistogramSnapshot) -> Vec<(Option<Duration>, u64)> {
        s.buckets().filter(|b| b.1 > 0).collect()
    }

    #[test]
    fn an_empty_histogram_has_every_bucket_at_zero() {
        let s = DurationHistogram::new().snapshot();
        assert_eq!(s.count(), 0);
        assert_eq!(s.sum(), Duration::ZERO);
        assert_eq!(s.buckets().count(), BUCKETS);
        assert_eq!(s.buckets().last(), Some((None, 0)));
        assert_eq!(s, HistogramSnapshot::default());
    }

    #[test]
    fn bounds_rise_and_are_inclusive() {
        assert!(BOUNDS_NS.windows(2).all(|w| w[0] < w[1]));
        let h = DurationHistogram::new();
        // Exactly on a bound: that bucket; one ns above: the next.
        h.observe(Duration::from_micros(10));
        h.observe(Duration::from_nanos(10_001));
        h.observe(Duration::from_millis(1));
        let s = h.snapshot();
        let us = Duration::from_micros;
        assert_eq!(
            counts(&s),
            vec![(Some(us(10)), 1), (Some(us(25)), 1), (Some(us(1000)), 1)]
        );
    }

    #[test]
    fn the_extremes_land_in_the_first_and_the_unbounded_bucket() {
        let h = DurationHistogram::new();
        h.observe(Duration::ZERO);
        h.observe(Duration::from_secs(500));
        h.observe(Duration::from_secs(501));
        // Beyond u64 nanoseconds: counted, its sum clamped, no panic.
        h.observe(Duration::MAX);
        let s = h.snapshot();
        assert_eq!(
            counts(&s),
            vec![
                (Some(Duration::from_micros(10)), 1),
                (Some(Duration::from_secs(500)), 1),
                (None, 2),
            ]
        );
        assert_eq!(s.count(), 4);
    }

    #[test]
    fn sum_and_count_add_up_every_observation() {
        let h = DurationHistogram::default();
        let ds = [3u64, 40, 700, 7_000, 90_000, 2_000_000]
            .map(Duration::from_micros)
            .to_vec();
        for d in &ds {
            h.observe(*d);
        }
        let s = h.snapshot();
        assert_eq!(s.count(), ds.len() as u64);
        assert_eq!(s.sum(), ds.iter().sum::<Duration>());
        // Each in the first bucket whose bound is at or above it.
        let (us, ms) = (Duration::from_micros, Duration::from_millis);
        assert_eq!(
            counts(&s),
            vec![
                (Some(us(10)), 1),
                (Some(us(50)), 1),
                (Some(ms(1)), 1),
                (Some(ms(10)), 1),
                (Some(ms(100)), 1),
                (Some(ms(2500)), 1),
            ]
        );
    }

    #[test]
    fn threads_observing_at_once_lose_nothing() {
        let h = DurationHistogram::new();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let h = &h;
                s.spawn(move || {
                    for i in 0..1000u64 {
                        h.observe(Duration::from_micros(t * 1000 + i));
                    }
                });
            }
        });
        let s = h.snapshot();
        assert_eq!(s.count(), 4000);
        let want: u64 = (0..4000u64).sum();
        assert_eq!(s.sum(), Duration::from_micros(want));
    }
}
