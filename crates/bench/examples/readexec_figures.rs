//! Read-engine figures: plain vs batched GET and 3-item RANGE over uniform
//! random existing keys (the key function of `docs/workloads.md`, 16-byte keys and values),
//! for batch sizes 1, 8, 32 and 128, with 1 and 2 threads.
//!
//! `cargo run --release -p combkv-bench --example readexec_figures -- [records] [secs]`
//! (defaults: 10,000,000 records, 3 s per figure). Every value is checked.
//!
//! The last column is the yardstick measured in the same run: the
//! `masstree` crate (a Rust Masstree, trie of B+trees with optimistic reads;
//! boxed 16-byte values, as C++ Masstree keeps values out of line), loaded
//! with the same records and read with the same keys and checks, one request
//! at a time as Masstree serves them. Each cell of a row runs right after
//! the one before it, so a row's ratios share the machine's state.

use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use combkv::readexec::{BatchResults, ReadRequest};
use combkv::{Config, Range, Store};
use common::{Rng, key};
use masstree::{MassTree15, RangeBound};

/// The Masstree peer: values boxed (out of line), as in C++ Masstree.
type Peer = MassTree15<[u8; 16]>;

/// The value of record i: its key reversed (16 printable bytes, checkable).
fn value(i: u64) -> [u8; 16] {
    let mut v = key(i);
    v.reverse();
    v
}

/// Whether `v` is the value of the record whose key is `k`: checked against
/// the key already drawn, rather than hashing the record number again, so
/// that checking every result costs the harness little.
fn is_value_of(v: &[u8], k: &[u8; 16]) -> bool {
    v.iter().eq(k.iter().rev())
}

/// Points a reused 3-item range spec at `k`.
fn set_start(r: &mut Range, k: &[u8]) {
    if let Bound::Included(start) = &mut r.start {
        start.clear();
        start.extend_from_slice(k);
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Get,
    Range3,
}

/// Ops per second over `threads` threads for `secs`.
fn measure(
    store: &Arc<Store>,
    n: u64,
    kind: Kind,
    batch: Option<usize>,
    threads: usize,
    secs: f64,
) -> f64 {
    let store = store.clone();
    timed(threads, secs, move |mut rng, deadline| {
        let mut ops = 0u64;
        let b = batch.unwrap_or(1);
        let mut keys = vec![[0u8; 16]; b];
        // Range specs are reused, their start keys rewritten in
        // place, as the server reuses its RANGE specs: the figure is
        // the engine's, not the allocator's.
        let mut ranges: Vec<Range> = (0..b)
            .map(|_| {
                Range::new(Bound::Included(Vec::with_capacity(16)), Bound::Unbounded).with_limit(3)
            })
            .collect();
        let mut out = BatchResults::new();
        while Instant::now() < deadline {
            for _ in 0..64 {
                for k in keys.iter_mut() {
                    *k = key(rng.below(n));
                }
                match (kind, batch) {
                    (Kind::Get, None) => {
                        let ok = store
                            .get_with(&keys[0], |it| {
                                it.is_some_and(|it| is_value_of(it.value, &keys[0]))
                            })
                            .unwrap();
                        assert!(ok, "wrong value");
                    }
                    (Kind::Range3, None) => {
                        set_start(&mut ranges[0], &keys[0]);
                        let mut first = true;
                        let seen = store
                            .scan(&ranges[0], |it| {
                                if first {
                                    assert!(is_value_of(it.value, &keys[0]), "wrong value");
                                    first = false;
                                }
                                true
                            })
                            .unwrap();
                        assert!(seen >= 1);
                    }
                    (Kind::Get, Some(_)) => {
                        let reqs: Vec<ReadRequest<'_>> =
                            keys.iter().map(|k| ReadRequest::Get(k)).collect();
                        store.read_batch(&reqs, &mut out).unwrap();
                        for (j, k) in keys.iter().enumerate() {
                            let v = out.value(j).expect("every key exists");
                            assert!(is_value_of(v, k), "wrong value");
                        }
                    }
                    (Kind::Range3, Some(_)) => {
                        for (r, k) in ranges.iter_mut().zip(&keys) {
                            set_start(r, k);
                        }
                        let reqs: Vec<ReadRequest<'_>> =
                            ranges.iter().map(ReadRequest::Range).collect();
                        store.read_batch(&reqs, &mut out).unwrap();
                        for (j, k) in keys.iter().enumerate() {
                            let first = out.items(j).next().expect("range finds its start key");
                            assert!(is_value_of(first.value, k), "wrong value");
                        }
                    }
                }
                ops += b as u64;
            }
        }
        ops
    })
}

/// Ops per second of `work` run on `threads` threads for `secs`: each
/// thread gets its own draws (seeded by its index, the same every run) and
/// the deadline, and returns the ops it did.
fn timed<F>(threads: usize, secs: f64, work: F) -> f64
where
    F: Fn(Rng, Instant) -> u64 + Clone + Send + 'static,
{
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let work = work.clone();
            let rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((t as u64 + 1) * 0x1234_5678));
            std::thread::spawn(move || work(rng, deadline))
        })
        .collect();
    let total: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    total as f64 / secs
}

/// The Masstree peer's ops per second over `threads` threads for `secs`:
/// the same draws and checks as `measure`'s plain path.
fn measure_peer(peer: &Arc<Peer>, n: u64, kind: Kind, threads: usize, secs: f64) -> f64 {
    let peer = peer.clone();
    timed(threads, secs, move |mut rng, deadline| {
        let guard = peer.guard();
        let mut ops = 0u64;
        while Instant::now() < deadline {
            for _ in 0..64 {
                let k = key(rng.below(n));
                match kind {
                    Kind::Get => {
                        let v = peer.get_with_guard(&k, &guard).expect("every key exists");
                        assert!(is_value_of(&v[..], &k), "wrong value");
                    }
                    Kind::Range3 => {
                        let mut seen = 0;
                        peer.scan(
                            RangeBound::Included(&k[..]),
                            RangeBound::Unbounded,
                            |_, v| {
                                if seen == 0 {
                                    assert!(is_value_of(&v[..], &k), "wrong value");
                                }
                                seen += 1;
                                seen < 3
                            },
                            &guard,
                        );
                        assert!(seen >= 1);
                    }
                }
                ops += 1;
            }
        }
        ops
    })
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .map_or(10_000_000, |s| s.parse().expect("records"));
    let secs: f64 = args.next().map_or(3.0, |s| s.parse().expect("seconds"));
    // Optional: only the figures whose "threads:op:batch" name contains
    // this (e.g. "2:get:128", "1:range3:plain"), for profiling one figure.
    let only = args.next();
    let store = Arc::new(Store::new(Config::default()).unwrap());
    let t = Instant::now();
    for i in 0..n {
        store.insert(&key(i), &value(i)).unwrap();
    }
    eprintln!("loaded {n} records in {:.1} s", t.elapsed().as_secs_f64());
    let peer: Arc<Peer> = Arc::new(MassTree15::new());
    let t = Instant::now();
    {
        let guard = peer.guard();
        for i in 0..n {
            peer.insert_with_guard(&key(i), value(i), &guard);
        }
    }
    eprintln!(
        "loaded the masstree peer in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    println!(
        "read engine figures: {n} records, 16 B keys and values, uniform keys, {secs} s each, M ops/s"
    );
    println!(
        "{:>7}  {:>6}  {:>8}  {:>8}  {:>8}  {:>8}  {:>8}  {:>8}  {:>9}",
        "threads",
        "op",
        "plain",
        "batch 1",
        "batch 8",
        "batch 32",
        "batch128",
        "masstree",
        "best/mt"
    );
    for threads in [1, 2] {
        for (kind, name) in [(Kind::Get, "get"), (Kind::Range3, "range3")] {
            let wanted = |b: &str| {
                only.as_ref()
                    .is_none_or(|o| format!("{threads}:{name}:{b}").contains(o.as_str()))
            };
            let mut row = format!("{threads:>7}  {name:>6}");
            let mut best: Option<f64> = None;
            for b in [None, Some(1), Some(8), Some(32), Some(128)] {
                let label = b.map_or("plain".to_string(), |b| b.to_string());
                if wanted(&label) {
                    let r = measure(&store, n, kind, b, threads, secs);
                    row += &format!("  {:>8.3}", r / 1e6);
                    best = Some(best.map_or(r, |x: f64| x.max(r)));
                } else {
                    row += &format!("  {:>8}", "-");
                }
            }
            if wanted("masstree") {
                let r = measure_peer(&peer, n, kind, threads, secs);
                row += &format!("  {:>8.3}", r / 1e6);
                match best {
                    Some(b) => row += &format!("  {:>8.2}x", b / r),
                    None => row += &format!("  {:>9}", "-"),
                }
            } else {
                row += &format!("  {:>8}  {:>9}", "-", "-");
            }
            println!("{row}");
        }
    }
}
