//! Write-path figures: session puts of 16-byte values over uniform random
//! keys drawn from `records` (so about 63% of draws overwrite a key the
//! load made and the rest insert), in pipelines of 16 writes per commit,
//! as a server applies a `-P 16` pipeline. 1 and 2 threads; every round
//! ends by checking a sample of the writes.
//!
//! `cargo run --release -p combkv-bench --example write_figures -- [records] [puts] [rounds] [threads]`
//! (defaults: 1,000,000 records, 2,000,000 puts per thread per round, 3
//! rounds, 1 and 2 threads; `threads` 1 runs one thread only, e.g. under
//! callgrind). Prints ns per put (per thread) and M puts/s (all threads).

use std::sync::Arc;
use std::time::Instant;

mod common;

use combkv::{Config, Store};
use common::{Rng, key};

/// The value a round writes for record `i`.
fn value(i: u64, round: u64) -> [u8; 16] {
    let mut v = [0u8; 16];
    v[..8].copy_from_slice(&i.to_le_bytes());
    v[8..].copy_from_slice(&round.to_le_bytes());
    v
}

const PIPELINE: usize = 16;

/// Puts `puts` random keys from `threads` threads; returns ns per put per
/// thread and puts per second over all threads.
fn measure(store: &Arc<Store>, n: u64, puts: u64, threads: usize, round: u64) -> (f64, f64) {
    let t0 = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((t as u64 + 1) * 0x1234_5678 + round));
                let mut ids = [0u64; PIPELINE];
                let mut last = 0;
                let t = Instant::now();
                let mut done = 0;
                while done < puts {
                    for id in ids.iter_mut() {
                        *id = rng.below(n);
                    }
                    let session = store.session();
                    for &id in &ids {
                        session.put(&key(id), &value(id, round)).unwrap();
                    }
                    session.commit().unwrap();
                    last = ids[PIPELINE - 1];
                    done += PIPELINE as u64;
                }
                let ns = t.elapsed().as_nanos() as f64 / done as f64;
                // The last write of this thread is visible (another thread
                // may have written the same key since, with the same round).
                let got = store.get(&key(last)).unwrap().expect("written key");
                assert_eq!(&got[..], &value(last, round), "wrong value");
                (ns, done)
            })
        })
        .collect();
    let results: Vec<(f64, u64)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let secs = t0.elapsed().as_secs_f64();
    let ns = results.iter().map(|r| r.0).sum::<f64>() / threads as f64;
    let total: u64 = results.iter().map(|r| r.1).sum();
    (ns, total as f64 / secs)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .map_or(1_000_000, |s| s.parse().expect("records"));
    let puts: u64 = args.next().map_or(2_000_000, |s| s.parse().expect("puts"));
    let rounds: u64 = args.next().map_or(3, |s| s.parse().expect("rounds"));
    let max_threads: usize = args.next().map_or(2, |s| s.parse().expect("threads"));
    let store = Arc::new(Store::new(Config::default()).unwrap());
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let t = Instant::now();
    for _ in 0..n {
        let i = rng.below(n);
        store.put(&key(i), &value(i, 0)).unwrap();
    }
    eprintln!(
        "loaded {} keys ({n} draws) in {:.1} s",
        store.len(),
        t.elapsed().as_secs_f64()
    );
    println!("write figures: {n} key space, 16 B keys and values, pipelines of {PIPELINE} puts");
    println!(
        "{:>7}  {:>5}  {:>8}  {:>8}",
        "threads", "round", "ns/put", "M puts/s"
    );
    for threads in (1..=2).filter(|&t| t <= max_threads) {
        for round in 1..=rounds {
            let (ns, rate) = measure(&store, n, puts, threads, round);
            println!("{threads:>7}  {round:>5}  {ns:>8.0}  {:>8.3}", rate / 1e6);
        }
    }
}
