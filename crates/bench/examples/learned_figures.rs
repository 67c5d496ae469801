//! Learned node search figures: GETs and 3-item RANGEs with the option off
//! and on, for dense, sparse and clustered 8-byte big-endian integer keys
//! and the 16-byte YCSB keys; the share of interior nodes that got a model;
//! and the cache lines a lookup's node searches read.
//!
//! `cargo run --release -p combkv-bench --example learned_figures --
//! [N] [SECS] [ROUNDS]` (defaults: 2,000,000 keys, 2 s per cell, 3
//! rounds). For each key set, two trees: built by random-order puts, and
//! bulk loaded (a checkpoint reloaded, as recovery does: evenly filled
//! leaves). Reads go through the read engine in batches of 16 on every
//! core, off and on alternating; each value read is checked.

use std::sync::Arc;
use std::time::{Duration, Instant};

use combkv::readexec::{BatchResults, ReadRequest};
use combkv::{Config, Durability, DurableConfig, Range, Store};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const BATCH: usize = 16;

fn keys(kind: &str, n: usize) -> Vec<Vec<u8>> {
    let mut rng = SmallRng::seed_from_u64(11);
    let mut out: Vec<Vec<u8>> = match kind {
        "dense" => (0..n as u64).map(|i| i.to_be_bytes().to_vec()).collect(),
        "sparse" => (0..n)
            .map(|_| rng.random::<u64>().to_be_bytes().to_vec())
            .collect(),
        "clustered" => {
            let mut v = Vec::with_capacity(n);
            while v.len() < n {
                let base = rng.random::<u64>() >> 8;
                let len = rng.random_range(1..200u64);
                v.extend((0..len).map(|i| (base + i).to_be_bytes().to_vec()));
            }
            v.truncate(n);
            v
        }
        _ => (0..n as u64)
            .map(|i| combkv_bench::keys::key(i).to_vec())
            .collect(),
    };
    out.sort();
    out.dedup();
    out
}

/// The value of a key: its last 8 bytes reversed.
fn value(k: &[u8]) -> Vec<u8> {
    k[k.len() - 8..].iter().rev().copied().collect()
}

fn config(learned: bool) -> Config {
    Config {
        learned_search: learned,
        ..Config::default()
    }
}

/// A store of `keys` put in random order, or bulk loaded from a checkpoint
/// in `dir`.
fn build(keys: &[Vec<u8>], learned: bool, loaded: bool, dir: &std::path::Path) -> Store {
    let mut order: Vec<&Vec<u8>> = keys.iter().collect();
    order.shuffle(&mut SmallRng::seed_from_u64(5));
    if !loaded {
        let store = Store::new(config(learned)).unwrap();
        for k in order {
            store.put(k, &value(k)).unwrap();
        }
        return store;
    }
    let _ = std::fs::remove_dir_all(dir);
    let durable = DurableConfig {
        checkpoint_wal_bytes: u64::MAX,
        checkpoint_interval: Duration::from_secs(86_400),
        ..DurableConfig::new(dir).with_mode(Durability::None)
    };
    let (store, _) = Store::open(config(learned), durable.clone()).unwrap();
    for chunk in order.chunks(1000) {
        let s = store.session();
        for k in chunk {
            s.put(k, &value(k)).unwrap();
        }
        s.commit().unwrap();
    }
    store.checkpoint().unwrap();
    store.shutdown().unwrap();
    drop(store);
    Store::open(config(learned), durable).unwrap().0
}

/// Requests per second over every core: GETs, or 3-item forward RANGEs.
fn measure(store: &Arc<Store>, keys: &Arc<Vec<Vec<u8>>>, ranges: bool, secs: f64) -> f64 {
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (store, keys) = (Arc::clone(store), Arc::clone(keys));
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t as u64 + 1);
                let mut out = BatchResults::new();
                let mut ops = 0u64;
                while Instant::now() < deadline {
                    for _ in 0..64 {
                        let picked: Vec<&Vec<u8>> = (0..BATCH)
                            .map(|_| &keys[rng.random_range(0..keys.len())])
                            .collect();
                        let rs: Vec<Range> = if ranges {
                            picked
                                .iter()
                                .map(|k| {
                                    Range::new(
                                        std::ops::Bound::Included((*k).clone()),
                                        std::ops::Bound::Unbounded,
                                    )
                                    .with_limit(3)
                                })
                                .collect()
                        } else {
                            Vec::new()
                        };
                        let reqs: Vec<ReadRequest<'_>> = if ranges {
                            rs.iter().map(ReadRequest::Range).collect()
                        } else {
                            picked.iter().map(|k| ReadRequest::Get(k)).collect()
                        };
                        store.read_batch(&reqs, &mut out).unwrap();
                        for (j, k) in picked.iter().enumerate() {
                            if ranges {
                                let first = out.items(j).next().expect("the key itself");
                                assert_eq!(first.key, &k[..], "wrong first key");
                            } else {
                                assert_eq!(out.value(j), Some(&value(k)[..]), "wrong value");
                            }
                        }
                        ops += BATCH as u64;
                    }
                }
                ops
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>() as f64 / secs
}

/// Mean (interior, leaf) cache lines per lookup over a sample of keys.
fn lines(store: &Store, keys: &[Vec<u8>]) -> (f64, f64) {
    let sample: Vec<&Vec<u8>> = keys.iter().step_by((keys.len() / 10_000).max(1)).collect();
    let (mut i, mut l) = (0, 0);
    for k in &sample {
        let (a, b) = store.lookup_lines(k);
        i += a;
        l += b;
    }
    (
        i as f64 / sample.len() as f64,
        l as f64 / sample.len() as f64,
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(2_000_000, |s| s.parse().expect("keys"));
    let secs: f64 = args.next().map_or(2.0, |s| s.parse().expect("seconds"));
    let rounds: usize = args.next().map_or(3, |s| s.parse().expect("rounds"));
    let dir = std::env::temp_dir().join("combkv-learned-figures");
    println!(
        "{n} keys, batches of {BATCH} through the read engine, {secs} s per cell, {rounds} rounds (median on/off)"
    );
    println!(
        "{:<10} {:<9} {:>9} {:>12} {:>12} {:>7} {:>12} {:>12} {:>7} {:>15} {:>15}",
        "keys",
        "tree",
        "learned",
        "GET off",
        "GET on",
        "on/off",
        "RANGE3 off",
        "RANGE3 on",
        "on/off",
        "lines off i+l",
        "lines on i+l"
    );
    for kind in ["dense", "sparse", "clustered", "ycsb"] {
        let keys = Arc::new(keys(kind, n));
        for loaded in [false, true] {
            let off = Arc::new(build(&keys, false, loaded, &dir));
            let on = Arc::new(build(&keys, true, loaded, &dir.with_extension("on")));
            let (learned, interior) = on.learned_nodes();
            let mut cells = [
                (Vec::new(), Vec::new(), Vec::new()),
                (Vec::new(), Vec::new(), Vec::new()),
            ];
            for (c, ranges) in [false, true].into_iter().enumerate() {
                for _ in 0..rounds {
                    let a = measure(&off, &keys, ranges, secs);
                    let b = measure(&on, &keys, ranges, secs);
                    cells[c].0.push(a);
                    cells[c].1.push(b);
                    cells[c].2.push(b / a);
                }
            }
            let (lo, lon) = (lines(&off, &keys), lines(&on, &keys));
            let [(g_off, g_on, g_r), (r_off, r_on, r_r)] = cells;
            println!(
                "{:<10} {:<9} {:>9} {:>12.0} {:>12.0} {:>6.3}x {:>12.0} {:>12.0} {:>6.3}x {:>15} {:>15}",
                kind,
                if loaded { "loaded" } else { "inserted" },
                format!("{learned}/{interior}"),
                median(g_off),
                median(g_on),
                median(g_r),
                median(r_off),
                median(r_on),
                median(r_r),
                format!("{:.2}+{:.2}", lo.0, lo.1),
                format!("{:.2}+{:.2}", lon.0, lon.1),
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(dir.with_extension("on"));
}
