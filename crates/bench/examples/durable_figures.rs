//! Durability figures: checkpoint time and peak RSS during a base
//! checkpoint (with and without a writer running), recovery time
//! (checkpoint load + log replay), peak RSS during a delta run with a
//! writer running, and put throughput with each durability mode.
//!
//! `cargo run --release -p combkv-bench --example durable_figures -- [N] [THREADS] [DIR]`
//! (defaults: 10000000 records of 16-byte keys and values, 2 threads,
//! $TMPDIR/combkv-durable-figures). The directory is removed at the end.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use combkv::{CheckpointKind, Config, Durability, DurableConfig, Store};

use combkv_bench::keys::key;

fn value(i: u64, round: u64) -> [u8; 16] {
    let mut v = [b'v'; 16];
    v[..8].copy_from_slice(&(i ^ round).to_le_bytes());
    v
}

/// (VmRSS, VmHWM) in KiB.
fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Resets VmHWM to the current RSS (Linux: write 5 to clear_refs).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Runs `f` while one writer puts at full speed over keys `0..n`:
/// (what `f` returned, the puts made meanwhile).
fn with_writer<T>(store: &Store, n: u64, f: impl FnOnce() -> T) -> (T, u64) {
    let writing = AtomicBool::new(true);
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut i = 0u64;
            while writing.load(Ordering::Relaxed) {
                store.put(&key(i % n), &value(i, 2)).unwrap();
                i += 1;
            }
            i
        });
        let out = f();
        writing.store(false, Ordering::Relaxed);
        (out, writer.join().unwrap())
    })
}

/// Prints the peak RSS since `reset_peak` against `before` (KiB).
fn print_peak(before: u64) {
    let (_, hwm) = rss_kib();
    println!(
        "peak RSS during the checkpoint: {:.0} MB vs {:.0} MB before = {:.3}x",
        hwm as f64 / 1024.0,
        before as f64 / 1024.0,
        hwm as f64 / before as f64
    );
}

fn config(dir: &std::path::Path, mode: Durability) -> DurableConfig {
    DurableConfig {
        // Checkpoints only when asked, so the figures measure one each, and
        // each a full one (`checkpoint_figures` measures delta runs).
        checkpoint_wal_bytes: u64::MAX,
        delta_checkpoints: false,
        checkpoint_interval: Duration::from_secs(86_400),
        ..DurableConfig::new(dir).with_mode(mode)
    }
}

/// Loads keys `0..n` with `threads` threads, in sessions of 1000 writes.
fn load(store: &Store, n: u64, threads: u64, round: u64) {
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let mut i = t;
                while i < n {
                    let session = store.session();
                    for _ in 0..1000 {
                        if i >= n {
                            break;
                        }
                        session.put(&key(i), &value(i, round)).unwrap();
                        i += threads;
                    }
                    session.commit().unwrap();
                }
            });
        }
    });
}

/// Puts for `secs` seconds with `threads` threads, `batch` writes per
/// session (1: plain puts); returns ops/s.
fn throughput(store: &Store, n: u64, threads: u64, batch: usize, secs: f64) -> f64 {
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (stop, done) = (&stop, &done);
            s.spawn(move || {
                let mut i = t.wrapping_mul(7919);
                let mut ops = 0;
                while !stop.load(Ordering::Relaxed) {
                    if batch == 1 {
                        store.put(&key(i % n), &value(i, 1)).unwrap();
                    } else {
                        let session = store.session();
                        for j in 0..batch as u64 {
                            session.put(&key((i + j) % n), &value(i, 1)).unwrap();
                        }
                        session.commit().unwrap();
                    }
                    ops += batch as u64;
                    i = i.wrapping_add(104_729 * batch as u64);
                }
                done.fetch_add(ops, Ordering::Relaxed);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
    });
    done.load(Ordering::Relaxed) as f64 / secs
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    let threads: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2);
    let dir = args.get(3).map_or_else(
        || std::env::temp_dir().join("combkv-durable-figures"),
        std::path::PathBuf::from,
    );
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{n} records of 16-byte keys and values, {threads} threads, {}",
        dir.display()
    );

    // Load through the log (EverySec: the load is not the measurement).
    let started = Instant::now();
    let (store, _) = Store::open(Config::default(), config(&dir, Durability::EverySec)).unwrap();
    load(&store, n, threads, 0);
    println!(
        "load: {:.1} s ({:.2} M puts/s, sessions of 1000, everysec)",
        started.elapsed().as_secs_f64(),
        n as f64 / started.elapsed().as_secs_f64() / 1e6
    );
    // A checkpoint with no writer: the scan alone.
    store.collect();
    let (rss_before, _) = rss_kib();
    reset_peak();
    let info = store.checkpoint().unwrap();
    let (_, hwm) = rss_kib();
    println!(
        "checkpoint, no writers: {:.2} s, {} items, {:.0} MB file; peak RSS {:.0} MB vs {:.0} MB before = {:.3}x",
        info.duration.as_secs_f64(),
        info.items,
        info.bytes as f64 / 1e6,
        hwm as f64 / 1024.0,
        rss_before as f64 / 1024.0,
        hwm as f64 / rss_before as f64
    );

    // Checkpoint with a writer running; peak RSS relative to before it.
    store.collect();
    let (rss_before, _) = rss_kib();
    reset_peak();
    let (info, written_during) = with_writer(&store, n, || store.checkpoint().unwrap());
    println!(
        "checkpoint, one writer at full speed: {:.2} s, {} items, {:.0} MB file, version {} ({} puts ran meanwhile)",
        info.duration.as_secs_f64(),
        info.items,
        info.bytes as f64 / 1e6,
        info.version,
        written_during
    );
    print_peak(rss_before);

    // A log tail to replay: 10% of the records rewritten after the checkpoint.
    let tail = n / 10;
    load(&store, tail, threads, 3);
    store.shutdown().unwrap();
    drop(store);

    // Delta runs on from here, for the last figure below (recovery reads
    // the same either way).
    let recovered = DurableConfig {
        delta_checkpoints: true,
        ..config(&dir, Durability::EverySec)
    };
    let started = Instant::now();
    let (store, report) = Store::open(Config::default(), recovered).unwrap();
    let total = started.elapsed();
    println!(
        "recovery: {:.2} s total = checkpoint load {:.2} s ({} items) + log replay {:.2} s ({} records)",
        total.as_secs_f64(),
        report.load_time.as_secs_f64(),
        report.checkpoint.as_ref().map_or(0, |c| c.items),
        report.replay_time.as_secs_f64(),
        report.records_replayed
    );
    assert_eq!(store.len(), n, "every record recovered");
    assert_eq!(store.get(&key(0)).unwrap().unwrap(), &value(0, 3)[..]);
    // A delta run (every checkpoint after the first base, by default)
    // with a writer running: it pins one version throughout.
    store.collect();
    let (rss_before, _) = rss_kib();
    reset_peak();
    let (info, written_during) = with_writer(&store, n, || store.checkpoint().unwrap());
    assert!(
        matches!(info.kind, CheckpointKind::Delta { .. }),
        "{info:?}"
    );
    println!(
        "delta run, one writer at full speed: {:.2} s, {} entries, {:.0} MB file ({} puts ran meanwhile)",
        info.duration.as_secs_f64(),
        info.items,
        info.bytes as f64 / 1e6,
        written_during
    );
    print_peak(rss_before);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);

    // Put throughput per mode (fresh store, keys over 1 M).
    let keys = n.min(1_000_000);
    println!("put throughput, {threads} threads, 16-byte keys and values over {keys} keys:");
    for mode in [Durability::Always, Durability::EverySec, Durability::None] {
        for (batch, what) in [(1usize, "plain puts"), (16, "sessions of 16")] {
            let _ = std::fs::remove_dir_all(&dir);
            let (store, _) = Store::open(Config::default(), config(&dir, mode)).unwrap();
            load(&store, keys, threads, 0);
            let fsyncs = store.persistence().fsyncs;
            let rate = throughput(&store, keys, threads, batch, 3.0);
            let fsyncs = store.persistence().fsyncs - fsyncs;
            println!(
                "  {mode:<8} {what:<15} {:>9.0} ops/s  ({:.0} fsyncs/s)",
                rate,
                fsyncs as f64 / 3.0
            );
            store.shutdown().unwrap();
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let (store, _) = Store::open(Config::default(), config(&dir, Durability::Always)).unwrap();
    load(&store, keys, threads, 0);
    let many = threads * 8;
    println!(
        "  always   plain puts, {many} threads {:>6.0} ops/s (group commit across threads)",
        throughput(&store, keys, many, 1, 3.0)
    );
    store.shutdown().unwrap();
    drop(store);
    let store = Store::new(Config::default()).unwrap();
    load(&store, keys, threads, 0);
    println!(
        "  in-memory (Store::new) plain puts {:>9.0} ops/s",
        throughput(&store, keys, threads, 1, 3.0)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
