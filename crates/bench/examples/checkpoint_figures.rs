//! Incremental checkpoint figures: bytes and time of a delta run against a
//! full checkpoint of the same store, recovery time from a base plus runs
//! against a base alone, and the time of the background merge.
//!
//! `cargo run --release -p combkv-bench --example checkpoint_figures --
//! [N] [CHANGED] [RUNS] [DIR]` (defaults: 10,000,000 records of 16-byte
//! keys and values, 0.01 of the keys changed before each run, 3 runs,
//! $TMPDIR/combkv-checkpoint-figures). Steps: load (2 threads, `None`
//! durability: the load is not the measurement), a full checkpoint (the
//! base); `RUNS` times: rewrite a random `CHANGED` fraction of the keys,
//! checkpoint (a delta run); a background merge of the chain; a full
//! checkpoint of the same state; then recovery of a copy of the chain
//! (base + runs) and of the full checkpoint, alternating, three times each.
//! The directories are removed at the end.

use std::time::{Duration, Instant};

use combkv::{CheckpointKind, Config, Durability, DurableConfig, Store};
use combkv_bench::keys::key;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn value(i: u64, round: u64) -> [u8; 16] {
    let mut v = [b'v'; 16];
    v[..8].copy_from_slice(&(i ^ (round << 40)).to_le_bytes());
    v
}

fn config(dir: &std::path::Path, deltas: bool, merge_after: usize) -> DurableConfig {
    DurableConfig {
        // Checkpoints only when asked.
        checkpoint_wal_bytes: u64::MAX,
        checkpoint_interval: Duration::from_secs(86_400),
        delta_checkpoints: deltas,
        merge_after_deltas: merge_after,
        ..DurableConfig::new(dir).with_mode(Durability::None)
    }
}

/// Writes `keys` (record numbers) with 2 threads in sessions of 1000.
fn write(store: &Store, keys: &[u64], round: u64) {
    std::thread::scope(|s| {
        for part in keys.chunks(keys.len().div_ceil(2).max(1)) {
            s.spawn(move || {
                for chunk in part.chunks(1000) {
                    let session = store.session();
                    for &i in chunk {
                        session.put(&key(i), &value(i, round)).unwrap();
                    }
                    session.commit().unwrap();
                }
            });
        }
    });
}

/// Copies the files of `from` (a data directory: no subdirectories) to `to`.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).cloned();
    let n: u64 = arg(1).and_then(|s| s.parse().ok()).unwrap_or(10_000_000);
    let changed: f64 = arg(2).and_then(|s| s.parse().ok()).unwrap_or(0.01);
    let runs: usize = arg(3).and_then(|s| s.parse().ok()).unwrap_or(3);
    let dir = arg(4).map_or_else(
        || std::env::temp_dir().join("combkv-checkpoint-figures"),
        std::path::PathBuf::from,
    );
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{n} records of 16-byte keys and values; {:.2}% of the keys rewritten before each of {runs} delta runs; {}",
        changed * 100.0,
        dir.display()
    );
    // No merge while the runs are measured (merge_after: more than runs).
    let (store, _) = Store::open(Config::default(), config(&dir, true, runs + 1)).unwrap();
    let started = Instant::now();
    write(&store, &(0..n).collect::<Vec<_>>(), 0);
    println!("load: {:.1} s", started.elapsed().as_secs_f64());
    let base = store.checkpoint().unwrap();
    assert_eq!(base.kind, CheckpointKind::Full);
    println!(
        "base (full) checkpoint: {:.1} MB, {} items, {:.2} s",
        mb(base.bytes),
        base.items,
        base.duration.as_secs_f64()
    );
    let mut rng = SmallRng::seed_from_u64(7);
    let per_run = ((n as f64) * changed) as usize;
    for r in 1..=runs {
        let keys: Vec<u64> = (0..per_run).map(|_| rng.random_range(0..n)).collect();
        write(&store, &keys, r as u64);
        let d = store.checkpoint().unwrap();
        assert!(matches!(d.kind, CheckpointKind::Delta { .. }), "{d:?}");
        println!(
            "delta run {r}: {:.2} MB ({:.2}% of the base), {} entries for {per_run} writes, {:.3} s ({:.1}% of the base's time)",
            mb(d.bytes),
            100.0 * d.bytes as f64 / base.bytes as f64,
            d.items,
            d.duration.as_secs_f64(),
            100.0 * d.duration.as_secs_f64() / base.duration.as_secs_f64()
        );
    }
    store.shutdown().unwrap();
    drop(store);

    // A copy of the chain (base and runs) for the recovery figures below.
    let chain_dir = dir.with_extension("chain");
    copy_dir(&dir, &chain_dir);

    // The merge the chain is due for: a checkpoint with nothing new
    // queues it.
    let (store, _) = Store::open(Config::default(), config(&dir, true, runs)).unwrap();
    store.checkpoint().unwrap();
    while store.persistence().merges_ok == 0 {
        assert_eq!(store.persistence().merges_failed, 0, "the merge failed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let m = store.persistence().last_merge.unwrap();
    println!(
        "background merge of the base and {runs} runs: {:.2} s, {:.1} MB, {} items",
        m.duration.as_secs_f64(),
        mb(m.bytes),
        m.items
    );
    store.shutdown().unwrap();
    drop(store);

    // The same state as one full checkpoint, for comparison.
    let (store, _) = Store::open(Config::default(), config(&dir, false, runs)).unwrap();
    store.put(b"one more", b"write").unwrap();
    let full = store.checkpoint().unwrap();
    assert_eq!(full.kind, CheckpointKind::Full);
    println!(
        "full checkpoint of the same state: {:.1} MB, {:.2} s",
        mb(full.bytes),
        full.duration.as_secs_f64()
    );
    store.shutdown().unwrap();
    drop(store);

    // Recovery, alternating: the base with its runs, and a full base.
    let (mut chained, mut whole) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        for (d, out, runs_wanted) in [(&chain_dir, &mut chained, runs), (&dir, &mut whole, 0)] {
            let (store, report) = Store::open(Config::default(), config(d, true, 100)).unwrap();
            let c = report.checkpoint.as_ref().expect("a checkpoint");
            assert_eq!(c.deltas.len(), runs_wanted, "{report}");
            out.push(report.load_time.as_secs_f64());
            drop(store);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "recovery (checkpoint load, median of 3): base + {runs} runs {:.2} s, full base alone {:.2} s = {:.2}x",
        median(&mut chained),
        median(&mut whole),
        median(&mut chained) / median(&mut whole)
    );
    let _ = std::fs::remove_dir_all(&chain_dir);
    let _ = std::fs::remove_dir_all(&dir);
}
