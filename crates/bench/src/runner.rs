//! Threads, timing and the measurement phases.
//!
//! One [`measure`] call is one target at one thread count: create the target,
//! load it, read its resident size, check its contents, then run the timed
//! read phases. The driver binary runs each call in a fresh child process so
//! that the resident-size figure belongs to that target alone.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::keys::{self, KEY_LEN, Key};
use crate::report::{Report, Throughput};
use crate::target::{BTreeMapTarget, MasstreeTarget, SccTarget, SkipMapTarget, Target, TargetKind};
use crate::{BenchError, Result};

/// What one [`measure`] call does.
#[derive(Clone, Debug)]
pub struct Params {
    /// Records loaded, numbered `0..records`.
    pub records: u64,
    /// Worker threads for every phase.
    pub threads: usize,
    /// Length of each timed read phase.
    pub secs: Duration,
    /// Seed for the workers' random number generators.
    pub seed: u64,
    /// Whether to check every record with a full scan after loading (untimed).
    pub scan: bool,
}

/// Runs every phase against a fresh target of the given kind.
pub fn measure(kind: TargetKind, p: &Params) -> Result<Report> {
    match kind {
        #[cfg(feature = "engine")]
        TargetKind::Engine => measure_with(kind, p, crate::target::EngineTarget::new),
        #[cfg(not(feature = "engine"))]
        TargetKind::Engine => Err(BenchError::new(
            "this build has no engine target (built without the `engine` feature)",
        )),
        TargetKind::BTreeMap => measure_with(kind, p, || Ok(BTreeMapTarget::new())),
        TargetKind::SkipMap => measure_with(kind, p, || Ok(SkipMapTarget::new())),
        TargetKind::Scc => measure_with(kind, p, || Ok(SccTarget::new())),
        TargetKind::Masstree => measure_with(kind, p, || Ok(MasstreeTarget::new())),
        other => Err(BenchError(format!(
            "{other} is a network target; engine-figures measures in-process targets \
             (use `combkv-bench --targets {other}`)"
        ))),
    }
}

fn measure_with<T: Target>(
    kind: TargetKind,
    p: &Params,
    make: impl FnOnce() -> Result<T>,
) -> Result<Report> {
    if p.records == 0 || p.threads == 0 {
        return Err(BenchError::new("records and threads must be at least 1"));
    }
    let tag = format!("[{kind}, {} thread(s)]", p.threads);
    let rss_before = rss_bytes()?;
    let target = make()?;

    eprintln!("{tag} loading {} records", p.records);
    let load = load(&target, p.records, p.threads)?;
    let rss_after = rss_bytes()?;

    if p.scan {
        eprintln!("{tag} checking every record with a full scan");
        verify_scan(&target, p.records)?;
    }

    let max_key = max_key(p.records);
    eprintln!("{tag} get");
    let get = timed(p, |w| get_op(&target, p.records, w))?;
    eprintln!("{tag} range 3");
    let range3 = timed(p, |w| range_op(&target, p.records, 3, &max_key, w))?;
    eprintln!("{tag} range 100");
    let range100 = timed(p, |w| range_op(&target, p.records, 100, &max_key, w))?;

    Ok(Report {
        target: kind,
        threads: p.threads,
        records: p.records,
        load,
        get,
        range3,
        range100,
        rss_before,
        rss_after,
    })
}

/// Resident set size of this process (`VmRSS` in `/proc/self/status`), in bytes.
pub fn rss_bytes() -> Result<u64> {
    crate::net::server::rss_bytes_of(std::process::id())
}

/// Inserts records `0..records` in record-number order (random key order).
/// With several threads, thread `t` inserts the `t`-th contiguous slice of the
/// record numbers, also in order.
pub fn load<T: Target + ?Sized>(target: &T, records: u64, threads: usize) -> Result<Throughput> {
    let barrier = Barrier::new(threads + 1);
    let threads_u64 = threads as u64;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads_u64)
            .map(|t| {
                let barrier = &barrier;
                let (lo, hi) = (
                    slice_bound(records, t, threads_u64),
                    slice_bound(records, t + 1, threads_u64),
                );
                s.spawn(move || -> Result<()> {
                    barrier.wait();
                    for i in lo..hi {
                        target.insert(&keys::key(i), &keys::value(i))?;
                    }
                    Ok(())
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<Result<()>> = handles.into_iter().map(join).collect();
        let secs = start.elapsed().as_secs_f64();
        results.into_iter().collect::<Result<()>>()?;
        Ok(Throughput { ops: records, secs })
    })
}

fn slice_bound(records: u64, t: u64, threads: u64) -> u64 {
    (u128::from(records) * u128::from(t) / u128::from(threads)) as u64
}

fn join<R>(h: std::thread::ScopedJoinHandle<'_, Result<R>>) -> Result<R> {
    h.join()
        .unwrap_or_else(|_| Err(BenchError::new("a worker thread panicked")))
}

/// Per-thread state of a timed phase.
#[derive(Debug)]
pub struct Worker {
    /// This thread's random number generator.
    pub rng: SmallRng,
    /// Reusable value buffer.
    pub buf: Vec<u8>,
}

/// How many operations a worker runs between looks at the stop flag.
const BATCH: u64 = 64;

/// Runs `op` on `p.threads` threads for about `p.secs` and counts completed
/// operations. The first error stops every thread and is returned.
pub fn timed<F>(p: &Params, op: F) -> Result<Throughput>
where
    F: Fn(&mut Worker) -> Result<()> + Sync,
{
    let barrier = Barrier::new(p.threads + 1);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..p.threads as u64)
            .map(|t| {
                let (barrier, stop, op) = (&barrier, &stop, &op);
                let seed = p.seed ^ (t + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                s.spawn(move || -> Result<u64> {
                    let mut w = Worker {
                        rng: SmallRng::seed_from_u64(seed),
                        buf: Vec::with_capacity(64),
                    };
                    barrier.wait();
                    let mut ops = 0;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..BATCH {
                            if let Err(e) = op(&mut w) {
                                stop.store(true, Ordering::Relaxed);
                                return Err(e);
                            }
                        }
                        ops += BATCH;
                    }
                    Ok(ops)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        // Sleep in short steps so that a failing worker ends the phase early.
        while !stop.load(Ordering::Relaxed) {
            let left = p.secs.saturating_sub(start.elapsed());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(20)));
        }
        stop.store(true, Ordering::Relaxed);
        let results: Vec<Result<u64>> = handles.into_iter().map(join).collect();
        let secs = start.elapsed().as_secs_f64();
        let ops = results.into_iter().sum::<Result<u64>>()?;
        Ok(Throughput { ops, secs })
    })
}

/// One uniform random get of an existing record; the value must be right.
pub fn get_op<T: Target + ?Sized>(target: &T, records: u64, w: &mut Worker) -> Result<()> {
    let i = w.rng.random_range(0..records);
    let key = keys::key(i);
    if !target.get(&key, &mut w.buf)? {
        return Err(BenchError(format!(
            "get: record {i} (key {}) is missing",
            show(&key)
        )));
    }
    if w.buf[..] != keys::value(i) {
        return Err(BenchError(format!(
            "get: record {i} (key {}) has value {}, want {}",
            show(&key),
            show(&w.buf),
            show(&keys::value(i))
        )));
    }
    Ok(())
}

/// One range of `n` items starting (inclusive) at the key of a uniform random
/// existing record. Checks that the first item is that record with its value,
/// that keys strictly ascend, and that exactly `n` items come back unless the
/// range reaches the greatest key (`max_key`). Values past the first are only
/// checked by [`verify_scan`], to keep the checking cost out of the figures.
pub fn range_op<T: Target + ?Sized>(
    target: &T,
    records: u64,
    n: usize,
    max_key: &Key,
    w: &mut Worker,
) -> Result<()> {
    let i = w.rng.random_range(0..records);
    let start = keys::key(i);
    let mut seen = 0usize;
    let mut prev: Key = [0; KEY_LEN];
    let mut bad: Option<(usize, &'static str)> = None;
    let count = target.range(&start, n, &mut |k, v| {
        if bad.is_none() {
            if k.len() != KEY_LEN {
                bad = Some((seen, "key of the wrong length"));
            } else if seen == 0 {
                if k != start {
                    bad = Some((0, "first key is not the start key"));
                } else if v != keys::value(i) {
                    bad = Some((0, "wrong value for the start key"));
                }
            } else if k <= &prev[..] {
                bad = Some((seen, "keys not in ascending order"));
            }
            if bad.is_none() {
                prev.copy_from_slice(k);
            }
        }
        seen += 1;
    })?;
    let fail = |what: String| {
        Err(BenchError(format!(
            "range {n} from record {i} (key {}): {what}",
            show(&start)
        )))
    };
    if let Some((at, what)) = bad {
        return fail(format!("item {at}: {what}"));
    }
    if count != seen {
        return fail(format!("returned count {count} but visited {seen} items"));
    }
    if seen == 0 {
        return fail("no items".into());
    }
    if seen > n {
        return fail(format!("{seen} items, limit was {n}"));
    }
    if seen < n && prev != *max_key {
        return fail(format!(
            "only {seen} items but the range did not reach the greatest key"
        ));
    }
    Ok(())
}

/// The greatest key among records `0..records`.
pub fn max_key(records: u64) -> Key {
    keys::key((0..records).max_by_key(|&i| keys::key_hash(i)).unwrap_or(0))
}

/// Walks the whole target in ascending order in chunks and checks that it
/// holds exactly `records` items, each a well-formed key with its value.
/// Together with the distinctness of the keys this proves that every record
/// `0..records` is present.
pub fn verify_scan<T: Target + ?Sized>(target: &T, records: u64) -> Result<()> {
    const CHUNK: usize = 1000;
    let mut total: u64 = 0;
    let mut start: Key = [b'0'; KEY_LEN];
    let mut have_prev = false;
    loop {
        let skip_first = have_prev;
        let want = CHUNK + usize::from(skip_first);
        let mut seen = 0usize;
        let mut err: Option<String> = None;
        let mut prev = start;
        let count = target.range(&start, want, &mut |k, v| {
            let idx = seen;
            seen += 1;
            if err.is_some() {
                return;
            }
            if idx == 0 && skip_first {
                if k != start {
                    err = Some(format!("key {} vanished during the scan", show(&start)));
                }
                return;
            }
            if k.len() != KEY_LEN || (have_prev && k <= &prev[..]) {
                err = Some(format!(
                    "key {} out of order or malformed after {}",
                    show(k),
                    show(&prev)
                ));
                return;
            }
            match keys::value_for_key(k) {
                Some(want) if v == want => {}
                Some(want) => {
                    err = Some(format!(
                        "key {} has value {}, want {}",
                        show(k),
                        show(v),
                        show(&want)
                    ));
                    return;
                }
                None => {
                    err = Some(format!("unexpected key {}", show(k)));
                    return;
                }
            }
            prev.copy_from_slice(k);
            have_prev = true;
            total += 1;
        })?;
        if let Some(e) = err {
            return Err(BenchError(format!("scan: {e}")));
        }
        if count != seen {
            return Err(BenchError(format!(
                "scan: returned count {count} but visited {seen} items"
            )));
        }
        if seen < want {
            break;
        }
        start = prev;
    }
    if total != records {
        return Err(BenchError(format!(
            "scan: found {total} records, loaded {records}"
        )));
    }
    Ok(())
}

fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(threads: usize) -> Params {
        Params {
            records: 5000,
            threads,
            secs: Duration::from_millis(50),
            seed: 7,
            scan: true,
        }
    }

    #[test]
    fn peers_pass_every_check() {
        for kind in [
            TargetKind::BTreeMap,
            TargetKind::SkipMap,
            TargetKind::Scc,
            TargetKind::Masstree,
        ] {
            for threads in [1, 2] {
                let r = measure(kind, &params(threads)).unwrap();
                assert_eq!(r.load.ops, 5000);
                assert!(r.get.ops > 0 && r.range3.ops > 0 && r.range100.ops > 0);
            }
        }
    }

    #[cfg(feature = "engine")]
    #[test]
    fn engine_passes_every_check() {
        for threads in [1, 2] {
            let r = measure(TargetKind::Engine, &params(threads)).unwrap();
            assert_eq!(r.load.ops, 5000);
            assert!(r.get.ops > 0 && r.range3.ops > 0 && r.range100.ops > 0);
        }
    }

    #[test]
    fn load_splits_records_exactly() {
        let t = BTreeMapTarget::new();
        load(&t, 1001, 3).unwrap();
        verify_scan(&t, 1001).unwrap();
    }

    #[test]
    fn checks_catch_bad_targets() {
        let t = BTreeMapTarget::new();
        load(&t, 1000, 1).unwrap();
        // A missing record.
        t.insert(&keys::key(5000), &keys::value(5000)).unwrap();
        assert!(verify_scan(&t, 1000).is_err());
        let t = BTreeMapTarget::new();
        load(&t, 1000, 1).unwrap();
        // A wrong value.
        t.insert(&keys::key(3), b"0123456789ABCDEF").unwrap();
        assert!(verify_scan(&t, 1000).is_err());
        let p = Params {
            records: 1000,
            ..params(1)
        };
        let mut w = Worker {
            rng: SmallRng::seed_from_u64(1),
            buf: Vec::new(),
        };
        let mut errs = 0;
        for _ in 0..10_000 {
            errs += usize::from(get_op(&t, p.records, &mut w).is_err());
        }
        assert!(errs > 0);
        // A short range that does not reach the greatest key.
        let t = BTreeMapTarget::new();
        load(&t, 1000, 1).unwrap();
        assert!(range_op(&t, 1000, 2000, &[b'z'; KEY_LEN], &mut w).is_err());
        assert!(range_op(&t, 1000, 2000, &max_key(1000), &mut w).is_ok());
    }

    #[test]
    fn rss_is_readable() {
        assert!(rss_bytes().unwrap() > 0);
    }
}
