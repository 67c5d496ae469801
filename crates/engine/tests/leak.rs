//! Dropping a store frees every node buffer it allocated, and every
//! out-of-line value those buffers held.
//!
//! `combkv::live_buffers_global()` and `combkv::live_external_values_global()`
//! count over all stores in the process, so this file holds exactly one test
//! (each integration test file is its own process).

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use combkv::{Config, Range, Store};

fn key(i: usize) -> Vec<u8> {
    format!("k{:06}", (i * 7_919) % 10_000).into_bytes()
}

fn value(i: usize, round: usize) -> Vec<u8> {
    let mut v = format!("v{i}.{round}.").into_bytes();
    // Mostly small values, some large ones.
    let pad = if i.is_multiple_of(97) { 1_000 } else { i % 40 };
    v.resize(v.len() + pad, b'x');
    v
}

#[test]
fn dropping_the_store_frees_every_buffer() {
    assert_eq!(
        combkv::live_buffers_global(),
        0,
        "no store exists yet in this process"
    );
    let store = Arc::new(Store::new(Config::with_node_size(1024)).expect("store"));

    // Load.
    for i in 0..5_000 {
        store.put(&key(i), &value(i, 0)).expect("put");
    }
    assert!(combkv::live_buffers_global() > 0);

    // A snapshot held across the churn pins old versions of many nodes.
    let pinned = store.snapshot(Duration::from_secs(600)).expect("snapshot");

    // Churn from several threads: deletes of whole runs (merges), re-inserts
    // (splits), updates, with snapshots taken, read and released meanwhile.
    let handles: Vec<_> = (0..3)
        .map(|t| {
            let store = Arc::clone(&store);
            thread::spawn(move || {
                for round in 1..=4 {
                    let (lo, hi) = (t * 1_500, t * 1_500 + 2_000);
                    for i in lo..hi {
                        if (i + round) % 3 == 0 {
                            store.delete(&key(i)).expect("delete");
                        } else {
                            store.put(&key(i), &value(i, round * 10 + t)).expect("put");
                        }
                        if i % 250 == 0 {
                            let s = store.snapshot(Duration::from_secs(600)).expect("snapshot");
                            store.get_at(s, &key(i)).expect("get_at");
                            store
                                .range_at(s, &Range::all().with_limit(50))
                                .expect("range_at");
                            store.put(&key(i + 1), b"after the snapshot").expect("put");
                            assert!(store.release_snapshot(s));
                        }
                    }
                    for i in lo..hi {
                        let _ = store.update(&key(i), &value(i, round * 10 + t + 5));
                        let _ = store.insert(&key(i), &value(i, round * 10 + t + 7));
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("churn thread");
    }
    store.range(&Range::all()).expect("range");
    store.get_at(pinned, &key(1)).expect("get_at pinned");
    assert!(store.release_snapshot(pinned));
    // A snapshot still held when the store is dropped must not leak either.
    let _held = store.snapshot(Duration::from_secs(600)).expect("snapshot");
    store.put(&key(3), b"after the held snapshot").expect("put");

    let live_before_drop = combkv::live_buffers_global();
    assert!(live_before_drop > 0);
    let values_before_drop = combkv::live_external_values_global();
    assert!(
        values_before_drop > 0,
        "the large values are held out of line"
    );
    drop(Arc::into_inner(store).expect("only owner"));

    let deadline = Instant::now() + Duration::from_secs(5);
    let counts = || {
        (
            combkv::live_buffers_global(),
            combkv::live_external_values_global(),
        )
    };
    let mut live = counts();
    while live != (0, 0) && Instant::now() < deadline {
        combkv::flush_reclamation();
        thread::sleep(Duration::from_millis(10));
        live = counts();
    }
    assert_eq!(
        live.0, 0,
        "{} of {live_before_drop} node buffers still allocated 5 s after the store was dropped",
        live.0
    );
    assert_eq!(
        live.1, 0,
        "{} of {values_before_drop} out-of-line value references still held 5 s after the store \
         was dropped",
        live.1
    );
}
