//! The read engine returns exactly what the plain read path returns at the
//! same read version: request by request, randomized, also while writers
//! split and merge nodes concurrently. Both paths run at one snapshot, which
//! pins the version.

use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use combkv::readexec::{BatchResults, ReadRequest};
use combkv::{Config, Item, Range, SnapshotId, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// `space` 0 asks for keys whose 8-byte search prefixes tie: a letter, seven
/// `x`, then 0 to 3 of `a`/`b` (390 keys). A node holding more than one
/// letter shares no prefix, so every key of a letter has the same prefix:
/// long runs of tied shortcuts, and keys that are prefixes of others.
fn key(rng: &mut StdRng, space: u32) -> Vec<u8> {
    if space == TIED {
        let mut k = vec![b'a' + rng.random_range(0..26u8)];
        k.extend_from_slice(b"xxxxxxx");
        for _ in 0..rng.random_range(0..4) {
            k.push(if rng.random_bool(0.5) { b'a' } else { b'b' });
        }
        return k;
    }
    format!("k{:05}", rng.random_range(0..space)).into_bytes()
}

/// The key space of `key` whose search prefixes tie.
const TIED: u32 = 0;

fn bound(rng: &mut StdRng, space: u32) -> Bound<Vec<u8>> {
    match rng.random_range(0..3) {
        0 => Bound::Included(key(rng, space)),
        1 => Bound::Excluded(key(rng, space)),
        _ => Bound::Unbounded,
    }
}

fn random_range(rng: &mut StdRng, space: u32) -> Range {
    let (mut a, mut b) = (bound(rng, space), bound(rng, space));
    if let (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) =
        (&a, &b)
        && x > y
    {
        std::mem::swap(&mut a, &mut b);
    }
    let mut r = Range::new(a, b);
    if rng.random_bool(0.8) {
        r = r.with_limit(rng.random_range(0..20));
    }
    if rng.random_bool(0.2) {
        r = r.reversed();
    }
    if rng.random_bool(0.2) {
        r = r.with_floor_start();
    }
    r
}

/// key, value, version, expiry
type Flat = Vec<(Vec<u8>, Vec<u8>, u64, Option<u64>)>;

fn as_items(out: &BatchResults, i: usize) -> Flat {
    out.items(i)
        .map(|it| {
            (
                it.key.to_vec(),
                it.value.to_vec(),
                it.version.get(),
                it.expires_at_ms,
            )
        })
        .collect()
}

fn from_items(items: Vec<Item>) -> Flat {
    items
        .into_iter()
        .map(|it| {
            (
                it.key.to_vec(),
                it.value.to_vec(),
                it.version.get(),
                it.expires_at_ms,
            )
        })
        .collect()
}

/// Runs one random batch through both paths at snapshot `snap` and compares.
fn compare_batch(store: &Store, snap: SnapshotId, rng: &mut StdRng, space: u32, n: usize) {
    let keys: Vec<Vec<u8>> = (0..n).map(|_| key(rng, space)).collect();
    let ranges: Vec<Range> = (0..n).map(|_| random_range(rng, space)).collect();
    let requests: Vec<ReadRequest<'_>> = (0..n)
        .map(|i| {
            if rng.random_bool(0.6) {
                ReadRequest::Get(&keys[i])
            } else {
                ReadRequest::Range(&ranges[i])
            }
        })
        .collect();
    let mut out = BatchResults::new();
    store.read_batch_at(snap, &requests, &mut out).unwrap();
    assert_eq!(out.len(), n);
    let pinned = store
        .list_snapshots()
        .into_iter()
        .find(|i| i.id == snap)
        .expect("the snapshot is live")
        .version;
    assert_eq!(out.read_version(), pinned);
    for (i, r) in requests.iter().enumerate() {
        let plain = match r {
            ReadRequest::Get(k) => from_items(store.get_at(snap, k).unwrap().into_iter().collect()),
            ReadRequest::Range(r) => from_items(store.range_at(snap, r).unwrap()),
        };
        assert_eq!(as_items(&out, i), plain, "request {i}: {r:?}");
    }
}

fn fill(store: &Store, rng: &mut StdRng, space: u32, n: usize) {
    for _ in 0..n {
        let k = key(rng, space);
        match rng.random_range(0..10) {
            0..=5 => {
                let len = rng.random_range(0..40);
                store.put(&k, &vec![b'v'; len]).unwrap();
            }
            6 => {
                let past = combkv::now_ms() - 1000;
                store
                    .put_with(&k, b"expired", combkv::Expiry::AtMs(past))
                    .unwrap();
            }
            _ => {
                store.delete(&k).unwrap();
            }
        }
    }
}

#[test]
fn batches_equal_plain_reads() {
    for node in [1024, 8192] {
        let store = Store::new(Config::with_node_size(node)).unwrap();
        let mut rng = StdRng::seed_from_u64(node as u64);
        for round in 0..30 {
            fill(&store, &mut rng, 3000, 400);
            let snap = store.snapshot(Duration::from_secs(60)).unwrap();
            for n in [1, 2, 7, 16, 33, 128] {
                compare_batch(&store, snap, &mut rng, 3000, n);
            }
            assert!(store.release_snapshot(snap), "round {round}");
        }
    }
}

/// Where search prefixes tie, a segment search must compare whole keys, and
/// runs of tied shortcuts span segments: both paths must still agree.
#[test]
fn batches_equal_plain_reads_where_prefixes_tie() {
    for node in [1024, 8192] {
        let store = Store::new(Config::with_node_size(node)).unwrap();
        let mut rng = StdRng::seed_from_u64(node as u64 + 1);
        for round in 0..30 {
            fill(&store, &mut rng, TIED, 150);
            let snap = store.snapshot(Duration::from_secs(60)).unwrap();
            for n in [1, 7, 16, 128] {
                compare_batch(&store, snap, &mut rng, TIED, n);
            }
            assert!(store.release_snapshot(snap), "round {round}");
        }
    }
}

#[test]
fn batch_on_empty_store_and_empty_batch() {
    let store = Store::new(Config::with_node_size(1024)).unwrap();
    let mut out = BatchResults::new();
    store.read_batch(&[], &mut out).unwrap();
    assert!(out.is_empty());
    let r = Range::all();
    store
        .read_batch(&[ReadRequest::Get(b"x"), ReadRequest::Range(&r)], &mut out)
        .unwrap();
    assert_eq!(out.len(), 2);
    assert!(out.value(0).is_none());
    assert_eq!(out.items(1).len(), 0);
}

#[test]
fn invalid_requests_fail_the_batch() {
    let store = Store::new(Config::with_node_size(1024)).unwrap();
    store.put(b"a", b"1").unwrap();
    let long = vec![b'k'; store.max_key_len() + 1];
    let mut out = BatchResults::new();
    let err = store.read_batch(&[ReadRequest::Get(b"a"), ReadRequest::Get(&long)], &mut out);
    assert!(matches!(err, Err(combkv::Error::KeyTooLong { .. })));
    assert!(
        store
            .read_batch(&[ReadRequest::Get(b"")], &mut out)
            .is_err()
    );
}

/// Writers keep splitting and merging nodes while batches and plain reads run
/// at snapshots taken mid-churn.
#[test]
fn batches_equal_plain_reads_under_concurrent_writes() {
    for node in [1024, 8192] {
        let store = Arc::new(Store::new(Config::with_node_size(node)).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..2u64)
            .map(|w| {
                let (store, stop) = (store.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut rng = StdRng::seed_from_u64(100 + w);
                    while !stop.load(Ordering::Relaxed) {
                        fill(&store, &mut rng, 5000, 200);
                        // Bursts of deletes make nodes merge.
                        for _ in 0..100 {
                            let k = key(&mut rng, 5000);
                            store.delete(&k).unwrap();
                        }
                    }
                })
            })
            .collect();
        let mut rng = StdRng::seed_from_u64(7);
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut batches = 0;
        while Instant::now() < deadline {
            let snap = store.snapshot(Duration::from_secs(60)).unwrap();
            compare_batch(&store, snap, &mut rng, 5000, 64);
            store.release_snapshot(snap);
            // The current version too: results come from one version.
            let keys: Vec<Vec<u8>> = (0..32).map(|_| key(&mut rng, 5000)).collect();
            let reqs: Vec<_> = keys.iter().map(|k| ReadRequest::Get(k)).collect();
            let mut out = BatchResults::new();
            store.read_batch(&reqs, &mut out).unwrap();
            assert!(out.read_version() <= store.read_version());
            batches += 1;
        }
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
        assert!(batches > 5, "{batches} batches");
        store.collect();
        let c = store.node_counts();
        assert_eq!(c.live_buffers, c.reachable_buffers);
    }
}

/// Values of 16 KiB and more are handed out by reference (not copied into
/// the batch's arena), shorter ones copied: a batch mixing both, ranges
/// included, returns every value byte for byte, and what it returned stays
/// valid after the key is overwritten and the old value reclaimed.
#[test]
fn large_values_in_batches_come_back_exactly() {
    let store = Store::new(Config::default()).unwrap();
    let value = |len: usize, seed: u8| -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    };
    let lens = [10, 16 * 1024 - 1, 16 * 1024, 100_000, 1 << 20];
    for (i, &len) in lens.iter().enumerate() {
        store
            .put(format!("k{i}").as_bytes(), &value(len, i as u8))
            .unwrap();
    }
    let keys: Vec<Vec<u8>> = (0..lens.len())
        .map(|i| format!("k{i}").into_bytes())
        .collect();
    let all = Range::all();
    let mut requests: Vec<ReadRequest<'_>> = keys.iter().map(|k| ReadRequest::Get(k)).collect();
    requests.push(ReadRequest::Range(&all));
    let mut out = BatchResults::new();
    store.read_batch(&requests, &mut out).unwrap();
    for (i, &len) in lens.iter().enumerate() {
        assert_eq!(out.value(i), Some(&value(len, i as u8)[..]), "GET k{i}");
    }
    let ranged: Vec<(Vec<u8>, Vec<u8>)> = out
        .items(lens.len())
        .map(|it| (it.key.to_vec(), it.value.to_vec()))
        .collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = lens
        .iter()
        .enumerate()
        .map(|(i, &len)| (keys[i].clone(), value(len, i as u8)))
        .collect();
    assert!(ranged == want, "the range's items differ");
    // The store lets the old 1 MB value go; the batch still holds it.
    store.put(b"k4", b"small now").unwrap();
    for _ in 0..20 {
        store.put(b"k4", b"again").unwrap();
        store.reclaim();
    }
    combkv::flush_reclamation();
    store.reclaim();
    assert_eq!(out.value(4), Some(&value(1 << 20, 4)[..]));
}
