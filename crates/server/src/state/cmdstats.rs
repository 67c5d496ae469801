//! Per-command statistics: calls, time, refusals, failures and a latency
//! histogram for every RESP and memcached command (INFO `commandstats`
//! and `latencystats`, the metrics' `combkv_commands_total` and
//! `combkv_command_duration_seconds`), and error replies by their code
//! (INFO `errorstats`).
//!
//! Each event loop has its own [`CommandStats`] (no cache line is shared
//! between loops on the request path: one relaxed add each); a reader sums
//! the loops' (`Shared::command_totals`). Latencies go into log-linear
//! buckets, four per power of two from 1 us to about 137 s (about 19%
//! apart, as a 2-significant-bit HDR histogram): percentiles are read as a
//! bucket's upper edge.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use parking_lot::Mutex;

/// Powers of two from 2^10 ns (1 us) to 2^37 ns (137 s).
const FIRST_POWER: u32 = 10;
const POWERS: usize = 28;
const SUB: usize = 4;
pub const BUCKETS: usize = POWERS * SUB;

/// The bucket of a latency of `ns` nanoseconds.
fn bucket(ns: u64) -> usize {
    if ns < 1 << FIRST_POWER {
        return 0;
    }
    let power = 63 - ns.leading_zeros();
    let sub = ((ns >> (power - 2)) & 3) as usize;
    let i = (power - FIRST_POWER) as usize * SUB + sub;
    i.min(BUCKETS - 1)
}

/// The upper edge of bucket `i`, in nanoseconds.
pub fn bucket_edge(i: usize) -> u64 {
    let power = (i / SUB) as u32 + FIRST_POWER;
    let sub = (i % SUB) as u64 + 1;
    (1u64 << power) + sub * (1u64 << (power - 2))
}

/// One command's counts on one loop.
#[derive(Debug)]
struct Slot {
    calls: AtomicU64,
    nanos: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
}

impl Default for Slot {
    fn default() -> Slot {
        Slot {
            calls: AtomicU64::new(0),
            nanos: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// One command's counts, summed over the loops.
#[derive(Debug, Clone)]
pub struct Totals {
    pub calls: u64,
    pub nanos: u64,
    pub rejected: u64,
    pub failed: u64,
    pub buckets: Box<[u64; BUCKETS]>,
}

impl Totals {
    /// The latency below which `q` (0..1) of the calls took, in
    /// microseconds (a bucket's upper edge); 0 without calls.
    pub fn percentile_us(&self, q: f64) -> f64 {
        let n: u64 = self.buckets.iter().sum();
        if n == 0 {
            return 0.0;
        }
        let want = ((n as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            seen += b;
            if seen >= want {
                return bucket_edge(i) as f64 / 1000.0;
            }
        }
        bucket_edge(BUCKETS - 1) as f64 / 1000.0
    }
}

/// One event loop's counts, by command id (see `Shared::command_names`).
#[derive(Debug)]
pub struct CommandStats {
    slots: Box<[Slot]>,
    errors: Mutex<BTreeMap<String, u64>>,
}

/// One event loop's counts, both protocols.
#[derive(Debug)]
pub struct LoopStats {
    pub resp: CommandStats,
    pub memcached: CommandStats,
    /// Read-engine batches by size: bucket `i` holds batches of up to
    /// 2^i reads (the last, any larger).
    batch_sizes: [AtomicU64; BATCH_BUCKETS],
}

/// Batch-size buckets: 1, 2, 4, ... 32768 reads, and more.
pub const BATCH_BUCKETS: usize = 16;

/// The names command ids stand for, per protocol (set once at start by
/// the listeners' layer, which knows the command tables).
#[derive(Debug, Default)]
pub struct CommandNames {
    pub resp: Vec<&'static str>,
    pub memcached: Vec<&'static str>,
}

impl LoopStats {
    pub fn new(names: &CommandNames) -> LoopStats {
        LoopStats {
            resp: CommandStats::new(names.resp.len()),
            memcached: CommandStats::new(names.memcached.len()),
            batch_sizes: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// A read-engine batch of `reads` reads ran.
    #[inline]
    pub fn batch(&self, reads: usize) {
        let i = (usize::BITS - reads.saturating_sub(1).leading_zeros()) as usize;
        self.batch_sizes[i.min(BATCH_BUCKETS - 1)].fetch_add(1, Relaxed);
    }

    /// CONFIG RESETSTAT: the batch counts (the commands' are theirs).
    pub fn reset_batches(&self) {
        for b in &self.batch_sizes {
            b.store(0, Relaxed);
        }
    }

    /// Adds this loop's batch counts by size into `into`.
    pub fn batches_into(&self, into: &mut [u64; BATCH_BUCKETS]) {
        for (sum, b) in into.iter_mut().zip(&self.batch_sizes) {
            *sum += b.load(Relaxed);
        }
    }

    /// Counts nothing (the fuzz harnesses, which have no loop).
    pub fn none() -> LoopStats {
        LoopStats::new(&CommandNames::default())
    }
}

/// Distinct error codes kept, as Redis keeps 128.
const MAX_ERROR_CODES: usize = 128;

impl CommandStats {
    pub fn new(commands: usize) -> CommandStats {
        CommandStats {
            slots: (0..commands).map(|_| Slot::default()).collect(),
            errors: Mutex::new(BTreeMap::new()),
        }
    }

    /// A call of command `id` that ran, and how long it took.
    #[inline]
    pub fn call(&self, id: usize, took: Duration) {
        let Some(s) = self.slots.get(id) else {
            return;
        };
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        s.calls.fetch_add(1, Relaxed);
        s.nanos.fetch_add(ns, Relaxed);
        s.buckets[bucket(ns)].fetch_add(1, Relaxed);
    }

    /// `n` calls of command `id` answered together in `took` (a batch of
    /// reads): each is counted with its share of the time.
    pub fn calls(&self, id: usize, n: u64, took: Duration) {
        if n == 0 {
            return;
        }
        let Some(s) = self.slots.get(id) else {
            return;
        };
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX) / n;
        s.calls.fetch_add(n, Relaxed);
        s.nanos.fetch_add(ns * n, Relaxed);
        s.buckets[bucket(ns)].fetch_add(n, Relaxed);
    }

    /// A call refused before it ran (arity, authentication, permissions,
    /// memory, loading): Redis's `rejected_calls`.
    pub fn rejected(&self, id: usize) {
        if let Some(s) = self.slots.get(id) {
            s.rejected.fetch_add(1, Relaxed);
        }
    }

    /// A call that ran and answered an error: Redis's `failed_calls`.
    pub fn failed(&self, id: usize) {
        if let Some(s) = self.slots.get(id) {
            s.failed.fetch_add(1, Relaxed);
        }
    }

    /// An error reply, counted by its code (its first word: `ERR`,
    /// `WRONGTYPE`, `NOAUTH`, `SERVER_ERROR` ...).
    pub fn error(&self, line: &str) {
        let code = line.split(' ').next().unwrap_or("");
        let mut errors = self.errors.lock();
        if let Some(n) = errors.get_mut(code) {
            *n += 1;
        } else if errors.len() < MAX_ERROR_CODES {
            errors.insert(code.to_string(), 1);
        }
    }

    /// Adds this loop's counts of command `id` into `t`.
    pub fn add_into(&self, id: usize, t: &mut Totals) {
        let Some(s) = self.slots.get(id) else {
            return;
        };
        t.calls += s.calls.load(Relaxed);
        t.nanos += s.nanos.load(Relaxed);
        t.rejected += s.rejected.load(Relaxed);
        t.failed += s.failed.load(Relaxed);
        for (sum, b) in t.buckets.iter_mut().zip(&s.buckets) {
            *sum += b.load(Relaxed);
        }
    }

    /// Adds this loop's error counts into `into`.
    pub fn errors_into(&self, into: &mut BTreeMap<String, u64>) {
        for (code, n) in self.errors.lock().iter() {
            *into.entry(code.clone()).or_default() += n;
        }
    }

    /// CONFIG RESETSTAT.
    pub fn reset(&self) {
        for s in self.slots.iter() {
            for a in [&s.calls, &s.nanos, &s.rejected, &s.failed]
                .into_iter()
                .chain(s.buckets.iter())
            {
                a.store(0, Relaxed);
            }
        }
        self.errors.lock().clear();
    }
}

impl Totals {
    pub fn zero() -> Totals {
        Totals {
            calls: 0,
            nanos: 0,
            rejected: 0,
            failed: 0,
            buckets: Box::new([0; BUCKETS]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_contain_their_values() {
        let mut last = 0;
        for i in 0..BUCKETS {
            let edge = bucket_edge(i);
            assert!(edge > last, "bucket {i}");
            last = edge;
        }
        for ns in [
            1u64,
            999,
            1024,
            1025,
            1279,
            1280,
            1500,
            2047,
            2048,
            1_000_000,
            3_000_000_000,
        ] {
            let i = bucket(ns);
            assert!(
                ns < bucket_edge(i),
                "{ns} in bucket {i} below {}",
                bucket_edge(i)
            );
            if i > 0 {
                assert!(
                    ns >= bucket_edge(i - 1),
                    "{ns} belongs above bucket {}",
                    i - 1
                );
            }
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn loops_add_up_and_percentiles_follow_the_calls() {
        let a = CommandStats::new(3);
        let b = CommandStats::new(3);
        for _ in 0..90 {
            a.call(1, Duration::from_micros(10));
        }
        for _ in 0..10 {
            b.call(1, Duration::from_millis(5));
        }
        b.calls(2, 4, Duration::from_micros(40));
        a.rejected(1);
        b.failed(1);
        a.error("ERR wrong number of arguments");
        b.error("ERR syntax error");
        b.error("WRONGTYPE Operation against a key");
        let mut t = Totals::zero();
        a.add_into(1, &mut t);
        b.add_into(1, &mut t);
        assert_eq!((t.calls, t.rejected, t.failed), (100, 1, 1));
        assert_eq!(t.nanos, 90 * 10_000 + 10 * 5_000_000);
        let p50 = t.percentile_us(0.5);
        assert!((10.0..=12.5).contains(&p50), "{p50}");
        let p99 = t.percentile_us(0.99);
        assert!((5000.0..=6200.0).contains(&p99), "{p99}");
        let mut t2 = Totals::zero();
        b.add_into(2, &mut t2);
        assert_eq!((t2.calls, t2.nanos), (4, 40_000));
        let mut errors = BTreeMap::new();
        a.errors_into(&mut errors);
        b.errors_into(&mut errors);
        assert_eq!(errors.get("ERR"), Some(&2));
        assert_eq!(errors.get("WRONGTYPE"), Some(&1));
        b.reset();
        let mut t = Totals::zero();
        b.add_into(1, &mut t);
        assert_eq!(t.calls, 0);
    }
}
