//! Model-based tests of the combkv store: random op sequences checked step by
//! step against a `BTreeMap` model (see `model_support`).
//!
//! 6,000 sequences run with 1 KiB nodes and 4,000 with the default 8 KiB
//! nodes, 1..=200 ops each (bursts expand to many more), plus 60 long
//! sequences of 1..=3000 ops, split over several tests so they run in
//! parallel. A failure prints the seed, a replay command
//! and a shrunk op list that can be pasted into a regression test.
//!
//! Knobs: `COMBKV_REPLAY=<node>:<seed>[:<max_ops>]` (the `replay` test), and for bug
//! hunting `COMBKV_SEED_BASE=<n>` (other seeds) and `COMBKV_KEEP_GOING=1`
//! (report every distinct failure instead of stopping at the first).

mod model_support;

#[allow(unused_imports)]
use std::ops::Bound::{Excluded, Included, Unbounded};

#[allow(unused_imports)]
use model_support::{
    CasVer::*, Exp::*, Op::*, RangeSpec, Setup, big, check_ops, k, kf, run_seeds, v,
};

const SMALL: usize = 1024;
const DEFAULT: usize = 8192;

#[test]
fn model_1k_a() {
    run_seeds(SMALL, 0..1500, 200);
}

#[test]
fn model_1k_b() {
    run_seeds(SMALL, 1500..3000, 200);
}

#[test]
fn model_1k_c() {
    run_seeds(SMALL, 3000..4500, 200);
}

#[test]
fn model_1k_d() {
    run_seeds(SMALL, 4500..6000, 200);
}

#[test]
fn model_8k_a() {
    run_seeds(DEFAULT, 1_000_000..1_001_000, 200);
}

#[test]
fn model_8k_b() {
    run_seeds(DEFAULT, 1_001_000..1_002_000, 200);
}

#[test]
fn model_8k_c() {
    run_seeds(DEFAULT, 1_002_000..1_003_000, 200);
}

#[test]
fn model_8k_d() {
    run_seeds(DEFAULT, 1_003_000..1_004_000, 200);
}

/// Fewer, longer sequences: bigger and deeper trees.
#[test]
fn model_1k_long() {
    run_seeds(SMALL, 2_000_000..2_000_040, 3000);
}

#[test]
fn model_8k_long() {
    run_seeds(DEFAULT, 3_000_000..3_000_020, 3000);
}

/// A few sequences at the other node sizes (different limits and layouts).
#[test]
fn model_other_node_sizes() {
    run_seeds(1024, 4_000_000..4_000_300, 200);
    run_seeds(2048, 4_100_000..4_100_200, 200);
    run_seeds(65_536, 4_200_000..4_200_100, 200);
}

/// `COMBKV_REPLAY=<node>:<seed>[:<max_ops>] cargo test -p combkv --test model replay -- --nocapture`
#[test]
fn replay() {
    model_support::replay_from_env();
}

/// Node sizes outside 1024..=65536 or not a power of two are refused.
#[test]
fn invalid_node_sizes_are_refused() {
    for n in [0, 256, 512, 513, 1000, 3 * 1024, 131_072] {
        let cfg = combkv::Config::with_node_size(n);
        assert!(
            combkv::Store::new(cfg).is_err(),
            "node size {n} should be refused"
        );
    }
    for n in [1024, 2048, 4096, 8192, 65_536] {
        let cfg = combkv::Config::with_node_size(n);
        assert!(
            combkv::Store::new(cfg).is_ok(),
            "node size {n} should be accepted"
        );
    }
}

/// A short hand-written smoke sequence over every op kind.
#[test]
fn smoke_every_op() {
    for setup in [Setup::small(), Setup::default_nodes()] {
        check_ops(
            setup,
            vec![
                Put(k(b"b"), v(b"1")),
                PutWith(k(b"c"), v(b"x"), Future),
                PutWith(k(b"d"), v(b"y"), Past),
                Insert(k(b"a"), v(b"")),
                Insert(k(b"a"), v(b"no")),
                Update(k(b"zz"), v(b"no")),
                Update(k(b"c"), big(5000, 1)),
                Snap,
                Cas(k(b"b"), Right, v(b"2"), Keep),
                Cas(k(b"b"), Stale, v(b"3"), Never),
                Cas(k(b"e"), Zero, v(b"e"), Future),
                Cas(k(b"e"), Bogus, v(b"e2"), Future),
                Incr(k(b"b"), 40),
                Incr(k(b"n"), -7),
                Incr(k(b"a"), 1),
                Incr(k(b"b"), i64::MAX),
                Append(k(b"c"), v(b"tail")),
                Append(k(b"f"), v(b"new")),
                Expire(k(b"e"), Never),
                Expire(k(b"f"), Past),
                Expire(k(b"nope"), Future),
                Get(k(b"b")),
                GetItem(k(b"c")),
                Get(k(b"")),
                Put(k(b""), v(b"x")),
                Put(kf(b"a", b'a', 1000), v(b"x")),
                Delete(k(b"a")),
                Delete(k(b"a")),
                Floor(k(b"bb")),
                Ceil(k(b"bb")),
                Scan(RangeSpec {
                    start: Included(k(b"bz")),
                    end: Excluded(k(b"n")),
                    limit: Some(2),
                    reverse: true,
                    floor_start: true,
                }),
                Snap,
                Snap,
                GetAt(0, k(b"b")),
                ScanAt(1, RangeSpec::all()),
                ListSnaps,
                Release(0),
                GetAt(0, k(b"c")),
                SnapTooLong,
                ReleaseBogus(3),
                Collect,
                CheckAll,
                Asc(k(b"q"), 0, 200, 20, false),
                Desc(k(b"r"), 100, 200, 20, true),
                CheckAll,
                DeleteMost(10, 2, 7),
                Reclaim,
                DeleteMost(0, 1, 0),
                Reclaim,
                Snap,
                SnapShort,
                Put(k(b"s"), v(b"1")),
                SnapShort,
                ListSnaps,
                GetAt(0, k(b"s")),
                Hammer(k(b"h"), 100, 10),
                PutWith(k(b"t"), v(b"t"), Epoch),
                PutWith(k(b"u"), v(b"u"), Max),
                Release(0),
                Release(0),
                ExpiredRun(k(b"x"), 0, 60),
                PutWith(k(b"xaabb"), v(b"live"), Future),
                Floor(k(b"xz")),
                Ceil(k(b"x")),
                Sweep(10),
                Snap,
                Sweep(3),
                Snap,
                Sweep(usize::MAX),
                Sweep(usize::MAX),
                GetAt(1, k(b"xaabb")),
                CheckAll,
            ],
        );
    }
}

/// Bug `collect_starved_by_other_threads`: buffers are freed through
/// crossbeam's process-wide epoch collector, so while another thread of the
/// process works on a *different* store, a quiescent store's `collect()`
/// (called several times) often leaves replaced buffers unfreed:
/// `live_buffers > reachable_buffers`. They drain only after hundreds to
/// thousands more `collect()` calls.
#[test]
fn regression_collect_starved_by_other_threads() {
    use combkv::{Config, Store};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let stop = Arc::new(AtomicBool::new(false));
    let busy = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let other = Store::new(Config::with_node_size(1024)).unwrap();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("k{:03}", i % 400);
                other.put(key.as_bytes(), b"some value").unwrap();
                i += 1;
            }
        })
    };
    let mut bad = Vec::new();
    for round in 0..200 {
        let store = Store::new(Config::with_node_size(1024)).unwrap();
        for i in 0..200 {
            store
                .put(format!("key{i:04}").as_bytes(), b"value")
                .unwrap();
        }
        for i in 0..190 {
            store.delete(format!("key{i:04}").as_bytes()).unwrap();
        }
        for _ in 0..4 {
            store.collect();
        }
        let c = store.node_counts();
        if c.live_buffers != c.reachable_buffers {
            bad.push((round, c.live_buffers, c.reachable_buffers));
        }
    }
    stop.store(true, Ordering::Relaxed);
    busy.join().unwrap();
    assert!(
        bad.is_empty(),
        "quiescent store, collect() x4, another thread busy on another store: \
         (round, live_buffers, reachable_buffers) mismatches: {bad:?}"
    );
}
