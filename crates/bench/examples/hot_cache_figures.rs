//! Hot-entry cache figures, in process: YCSB C (100% GET) and B (95% GET,
//! 5% update) with the zipfian and the uniform distribution, GETs as
//! read-engine batches of 1 and of 16 (what a server's event loop sends for
//! a client that waits for each reply, and for a pipeline), each with the
//! cache off and on (`slots` per thread), alternating in the same run.
//!
//! `cargo run --release -p combkv-bench --example hot_cache_figures --
//! [records] [secs] [slots] [rounds]` (defaults: 1,000,000 records, 2 s per
//! cell, 4096 slots, 3 rounds). Keys and 16-byte values as in
//! `docs/workloads.md`; every value read is checked (an update writes the
//! record's value again, so a stale read would still pass: the stale-hit
//! checks are the stress test's). Prints ops/s per cell and the cache's
//! hit rate, then the median ratio on/off per row.

use std::sync::Arc;
use std::time::{Duration, Instant};

use combkv::readexec::{BatchResults, ReadRequest};
use combkv::{Config, Store};
use combkv_bench::generator::{Chooser, Distribution};
use combkv_bench::keys::key;
use rand::SeedableRng;
use rand::rngs::SmallRng;

/// The value of record i: its key reversed (16 printable bytes).
fn value(k: &[u8; 16]) -> [u8; 16] {
    let mut v = *k;
    v.reverse();
    v
}

#[derive(Clone, Copy, Debug)]
struct Cell {
    update_pct: u32,
    dist: Distribution,
    batch: usize,
    slots: usize,
}

/// Ops per second and the hit rate (hits / cached GETs) over `threads`.
fn measure(store: &Arc<Store>, n: u64, c: Cell, threads: usize, secs: f64) -> (f64, f64) {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t as u64 + 1);
                let mut chooser = Chooser::new(c.dist, n);
                let mut out = match c.slots {
                    0 => BatchResults::new(),
                    s => BatchResults::with_hot_cache(s),
                };
                let mut keys = vec![[0u8; 16]; c.batch];
                let mut ops = 0u64;
                let mut step = 0u32;
                while Instant::now() < deadline {
                    for _ in 0..64 {
                        step = step.wrapping_add(1);
                        if c.update_pct > 0 && step % 100 < c.update_pct {
                            let k = key(chooser.next(&mut rng, n));
                            store.put(&k, &value(&k)).unwrap();
                            ops += 1;
                            continue;
                        }
                        for k in keys.iter_mut() {
                            *k = key(chooser.next(&mut rng, n));
                        }
                        let reqs: Vec<ReadRequest<'_>> =
                            keys.iter().map(|k| ReadRequest::Get(k)).collect();
                        store.read_batch(&reqs, &mut out).unwrap();
                        for (j, k) in keys.iter().enumerate() {
                            assert_eq!(out.value(j), Some(&value(k)[..]), "wrong value");
                        }
                        ops += c.batch as u64;
                    }
                }
                let s = out.hot_cache().map(|h| h.stats()).unwrap_or_default();
                (ops, s.hits, s.hits + s.misses)
            })
        })
        .collect();
    let (mut ops, mut hits, mut gets) = (0, 0, 0);
    for h in handles {
        let (o, hi, g) = h.join().unwrap();
        ops += o;
        hits += hi;
        gets += g;
    }
    let rate = if gets == 0 {
        0.0
    } else {
        hits as f64 / gets as f64
    };
    (ops as f64 / secs, rate)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .map_or(1_000_000, |s| s.parse().expect("records"));
    let secs: f64 = args.next().map_or(2.0, |s| s.parse().expect("seconds"));
    let slots: usize = args.next().map_or(4096, |s| s.parse().expect("slots"));
    let rounds: usize = args.next().map_or(3, |s| s.parse().expect("rounds"));
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let store = Arc::new(Store::new(Config::default()).unwrap());
    for i in 0..n {
        let k = key(i);
        store.put(&k, &value(&k)).unwrap();
    }
    println!(
        "{n} records, {threads} threads, {secs} s per cell, {slots} slots per thread, {rounds} rounds"
    );
    println!(
        "{:<22} {:>12} {:>12} {:>8} {:>7}",
        "workload", "off ops/s", "on ops/s", "on/off", "hits"
    );
    for (name, update_pct) in [("C", 0), ("B", 5)] {
        for dist in [Distribution::Zipfian, Distribution::Uniform] {
            for batch in [1, 16] {
                let mut ratios = Vec::new();
                for _ in 0..rounds {
                    let cell = |slots| Cell {
                        update_pct,
                        dist,
                        batch,
                        slots,
                    };
                    let (off, _) = measure(&store, n, cell(0), threads, secs);
                    let (on, rate) = measure(&store, n, cell(slots), threads, secs);
                    ratios.push(on / off);
                    println!(
                        "{:<22} {off:>12.0} {on:>12.0} {:>7.3}x {:>6.1}%",
                        format!("{name} {dist} batch {batch}"),
                        on / off,
                        rate * 100.0
                    );
                }
                println!(
                    "{:<22} median on/off {:.3}x",
                    format!("{name} {dist} batch {batch}"),
                    median(ratios)
                );
            }
        }
    }
}
