//! The hot-entry cache answers exactly what the tree answers: against a
//! `BTreeMap` model under random writes that split, merge and rewrite the
//! leaves under cached keys; entry by entry for the cases validation must
//! catch (an in-place overwrite, a delete, an expiry, a leaf rewrite, a
//! store swapped under the cache); and never for snapshot reads. The
//! concurrent case is the stress test's `stress_hot_cache`, whose
//! linearizability check also catches a planted stale hit.

use std::collections::BTreeMap;
use std::ops::Bound;

use combkv::readexec::{BatchResults, HOT_KEY_MAX, HotCacheStats, ReadRequest};
use combkv::{AtomicWrite, Config, Expiry, Range, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn stats(out: &BatchResults) -> HotCacheStats {
    out.hot_cache().expect("a hot cache").stats()
}

/// GETs `keys` in one batch; the values found.
fn get_all(store: &Store, out: &mut BatchResults, keys: &[&[u8]]) -> Vec<Option<Vec<u8>>> {
    let reqs: Vec<ReadRequest<'_>> = keys.iter().map(|k| ReadRequest::Get(k)).collect();
    store.read_batch(&reqs, out).unwrap();
    (0..keys.len())
        .map(|i| out.value(i).map(<[u8]>::to_vec))
        .collect()
}

fn get(store: &Store, out: &mut BatchResults, key: &[u8]) -> Option<Vec<u8>> {
    get_all(store, out, &[key]).pop().unwrap()
}

#[test]
fn cached_batches_equal_the_model_under_random_writes() {
    for seed in 0..4u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let store = Store::new(Config::with_node_size(1024)).unwrap();
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut out = BatchResults::with_hot_cache(64);
        let key = |rng: &mut StdRng| -> Vec<u8> {
            // A hot run of 24 keys takes half the draws.
            if rng.random_bool(0.5) {
                format!("hot{:03}", rng.random_range(0..24)).into_bytes()
            } else {
                format!("k{:05}", rng.random_range(0..1500)).into_bytes()
            }
        };
        for step in 0..6_000 {
            let k = key(&mut rng);
            match rng.random_range(0..100) {
                0..45 => {
                    let v = format!("{step}").into_bytes();
                    store.put(&k, &v).unwrap();
                    model.insert(k, v);
                }
                45..60 => {
                    store.delete(&k).unwrap();
                    model.remove(&k);
                }
                60..64 => {
                    // Bursts of neighbours: splits, then merges.
                    let base = rng.random_range(0..1400);
                    let insert = rng.random_bool(0.5);
                    for j in base..base + 60 {
                        let k = format!("k{j:05}").into_bytes();
                        if insert {
                            store.put(&k, b"burst").unwrap();
                            model.insert(k, b"burst".to_vec());
                        } else {
                            store.delete(&k).unwrap();
                            model.remove(&k);
                        }
                    }
                }
                64..67 => {
                    let k2 = key(&mut rng);
                    if k2 == k {
                        continue;
                    }
                    let writes = [
                        AtomicWrite::Put {
                            key: &k,
                            value: b"group",
                            expiry: Expiry::Never,
                        },
                        AtomicWrite::Delete { key: &k2 },
                    ];
                    store.write_atomically(&writes).unwrap();
                    model.insert(k.clone(), b"group".to_vec());
                    model.remove(&k2);
                }
                67 if rng.random_range(0..20) == 0 => {
                    store.clear().unwrap();
                    model.clear();
                }
                _ => {}
            }
            let keys: Vec<Vec<u8>> = (0..rng.random_range(1..9)).map(|_| key(&mut rng)).collect();
            let r = Range::new(Bound::Included(key(&mut rng)), Bound::Unbounded).with_limit(3);
            let mut reqs: Vec<ReadRequest<'_>> = keys.iter().map(|k| ReadRequest::Get(k)).collect();
            reqs.push(ReadRequest::Range(&r));
            store.read_batch(&reqs, &mut out).unwrap();
            for (i, k) in keys.iter().enumerate() {
                assert_eq!(
                    out.value(i),
                    model.get(k).map(Vec::as_slice),
                    "seed {seed} step {step}: GET {k:?}"
                );
                let item = out.items(i).next();
                let plain = store.get_item(k).unwrap();
                assert_eq!(item.map(|it| it.version), plain.map(|it| it.version));
            }
            let range: Vec<&[u8]> = out.items(keys.len()).map(|it| it.key).collect();
            let want: Vec<&[u8]> = model
                .range::<[u8], _>((r.start.as_ref().map(|k| &k[..]), Bound::Unbounded))
                .take(3)
                .map(|(k, _)| &k[..])
                .collect();
            assert_eq!(range, want, "seed {seed} step {step}: RANGE");
        }
        let s = stats(&out);
        eprintln!("seed {seed}: {s:?}");
        assert!(s.hits > 1_000 && s.stale > 100 && s.fills > 100, "{s:?}");
    }
}

#[test]
fn an_entry_outlives_writes_to_its_leaf_but_not_to_its_key() {
    let store = Store::new(Config::default()).unwrap();
    for i in 0..20 {
        store.put(format!("k{i:02}").as_bytes(), b"v0").unwrap();
    }
    let mut out = BatchResults::with_hot_cache(64);
    // First sighting leaves a ghost, the second stamps, the third hits.
    for _ in 0..3 {
        assert_eq!(get(&store, &mut out, b"k05").as_deref(), Some(&b"v0"[..]));
    }
    assert_eq!(stats(&out).hits, 1);
    assert_eq!(stats(&out).fills, 1);
    // A neighbour overwritten in the same leaf: the entry still holds.
    store.put(b"k06", b"v1").unwrap();
    assert_eq!(get(&store, &mut out, b"k05").as_deref(), Some(&b"v0"[..]));
    assert_eq!(stats(&out).hits, 2);
    // The key itself overwritten: the entry is stale, the new value read.
    store.put(b"k05", b"v2").unwrap();
    assert_eq!(get(&store, &mut out, b"k05").as_deref(), Some(&b"v2"[..]));
    assert_eq!(stats(&out).stale, 1);
    assert_eq!(get(&store, &mut out, b"k05").as_deref(), Some(&b"v2"[..]));
    assert_eq!(stats(&out).hits, 3);
    // Deleted: read as absent, and then cached as absent.
    store.delete(b"k05").unwrap();
    assert_eq!(get(&store, &mut out, b"k05"), None);
    assert_eq!(get(&store, &mut out, b"k05"), None);
    assert_eq!(stats(&out).hits, 4);
    store.put(b"k05", b"v3").unwrap();
    assert_eq!(get(&store, &mut out, b"k05").as_deref(), Some(&b"v3"[..]));
    // Enough writes to the leaf to merge its log into a new buffer.
    for round in 0..50 {
        store
            .put(format!("k{:02}", round % 20 + 30).as_bytes(), b"x")
            .unwrap();
    }
    let before = stats(&out);
    assert_eq!(get(&store, &mut out, b"k05").as_deref(), Some(&b"v3"[..]));
    assert_eq!(
        stats(&out).stale,
        before.stale + 1,
        "the leaf was rewritten"
    );
}

#[test]
fn expiry_is_checked_on_every_hit() {
    let store = Store::new(Config::default()).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    store
        .put_with(b"ttl", b"soon gone", Expiry::AtMs(now + 300))
        .unwrap();
    let mut out = BatchResults::with_hot_cache(16);
    for _ in 0..3 {
        assert_eq!(
            get(&store, &mut out, b"ttl").as_deref(),
            Some(&b"soon gone"[..])
        );
    }
    assert_eq!(stats(&out).hits, 1);
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert_eq!(get(&store, &mut out, b"ttl"), None);
    assert_eq!(stats(&out).hits, 2, "the expired item came from the entry");
}

#[test]
fn a_cache_moved_to_another_store_forgets_the_first() {
    let a = Store::new(Config::default()).unwrap();
    let b = Store::new(Config::default()).unwrap();
    a.put(b"k", b"from a").unwrap();
    b.put(b"k", b"from b").unwrap();
    let mut out = BatchResults::with_hot_cache(16);
    for _ in 0..3 {
        assert_eq!(get(&a, &mut out, b"k").as_deref(), Some(&b"from a"[..]));
    }
    assert_eq!(stats(&out).hits, 1);
    for _ in 0..3 {
        assert_eq!(get(&b, &mut out, b"k").as_deref(), Some(&b"from b"[..]));
    }
    assert_eq!(stats(&out).hits, 2);
}

#[test]
fn snapshot_reads_and_long_keys_bypass_the_cache() {
    let store = Store::new(Config::default()).unwrap();
    let long = vec![b'l'; HOT_KEY_MAX + 1];
    store.put(b"k", b"old").unwrap();
    store.put(&long, b"long").unwrap();
    let snap = store.snapshot(std::time::Duration::from_secs(60)).unwrap();
    store.put(b"k", b"new").unwrap();
    let mut out = BatchResults::with_hot_cache(16);
    for _ in 0..3 {
        assert_eq!(get(&store, &mut out, b"k").as_deref(), Some(&b"new"[..]));
        assert_eq!(get(&store, &mut out, &long).as_deref(), Some(&b"long"[..]));
    }
    let before = stats(&out);
    assert_eq!(before.hits, 1, "only the short key is cached");
    store
        .read_batch_at(snap, &[ReadRequest::Get(b"k")], &mut out)
        .unwrap();
    assert_eq!(out.value(0), Some(&b"old"[..]));
    assert_eq!(
        stats(&out),
        before,
        "a snapshot read leaves the cache alone"
    );
    store.release_snapshot(snap);
}

#[test]
fn a_cold_stream_does_not_evict_hot_keys() {
    let store = Store::new(Config::default()).unwrap();
    for i in 0..5_000 {
        store.put(format!("k{i:05}").as_bytes(), b"v").unwrap();
    }
    let mut out = BatchResults::with_hot_cache(256);
    let hot: Vec<Vec<u8>> = (0..32).map(|i| format!("k{i:05}").into_bytes()).collect();
    for _ in 0..20 {
        for k in &hot {
            get(&store, &mut out, k);
        }
    }
    let warm = stats(&out);
    // Each cold key is seen once; the hot keys stay in between.
    let mut rng = StdRng::seed_from_u64(9);
    for _ in 0..20 {
        for _ in 0..64 {
            let k = format!("k{:05}", rng.random_range(1000..5000));
            get(&store, &mut out, k.as_bytes());
        }
        for k in &hot {
            get(&store, &mut out, k);
        }
    }
    let s = stats(&out);
    let hot_hits = s.hits - warm.hits;
    assert!(hot_hits >= 20 * 32 * 9 / 10, "{hot_hits} hot hits of 640");
    assert!(
        s.fills - warm.fills < 100,
        "{} stamps for cold keys",
        s.fills - warm.fills
    );
}

#[test]
fn a_cache_without_hits_bypasses_itself_until_a_hot_set_shows() {
    let store = Store::new(Config::default()).unwrap();
    for i in 0..20_000 {
        store.put(format!("k{i:05}").as_bytes(), b"v").unwrap();
    }
    let mut out = BatchResults::with_hot_cache(1024);
    // Every key once: no hits, so after a window most GETs skip the cache.
    for i in 0..20_000 {
        let k = format!("k{i:05}");
        assert_eq!(
            get(&store, &mut out, k.as_bytes()).as_deref(),
            Some(&b"v"[..])
        );
    }
    let cold = stats(&out);
    assert_eq!(cold.hits, 0);
    assert!(cold.bypassed > 10_000, "{cold:?}");
    // Eight hot keys: the sampled probes admit them and see them hit,
    // and the cache turns itself back on.
    for round in 0..10_000 {
        let k = format!("k{:05}", round % 8);
        assert_eq!(
            get(&store, &mut out, k.as_bytes()).as_deref(),
            Some(&b"v"[..])
        );
    }
    let hot = stats(&out);
    assert!(hot.hits > 3_000, "{hot:?}");
}
