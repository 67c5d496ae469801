//! One-behaviour tests of the store API over many splits and merges.

use std::collections::BTreeMap;
use std::ops::Bound;

use combkv::{Config, Range, Store};

fn key(i: u64) -> Vec<u8> {
    format!("k{:08}", (i * 7919) % 100_003).into_bytes()
}

fn check_all(store: &Store, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let got: Vec<(Vec<u8>, Vec<u8>)> = store
        .range(&Range::all())
        .unwrap()
        .into_iter()
        .map(|i| (i.key.to_vec(), i.value.to_vec()))
        .collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want);
    let rev: Vec<Vec<u8>> = store
        .range(&Range::all().reversed())
        .unwrap()
        .into_iter()
        .map(|i| i.key.to_vec())
        .collect();
    let want_rev: Vec<Vec<u8>> = model.keys().rev().cloned().collect();
    assert_eq!(rev, want_rev);
}

#[test]
fn inserts_updates_deletes_across_splits_and_merges() {
    for node in [1024, 8192] {
        let store = Store::new(Config::with_node_size(node)).unwrap();
        let mut model = BTreeMap::new();
        let n = if node == 1024 { 3000 } else { 20000 };
        for i in 0..n {
            let k = key(i);
            let v = format!("v{i}").into_bytes();
            store.put(&k, &v).unwrap();
            model.insert(k, v);
        }
        check_all(&store, &model);
        for i in 0..n {
            let k = key(i);
            assert_eq!(
                store.get(&k).unwrap().as_deref(),
                model.get(&k).map(|v| &v[..]),
                "{i}"
            );
        }
        for i in (0..n).filter(|i| i % 3 != 0) {
            let k = key(i);
            assert!(store.delete(&k).unwrap().is_some());
            model.remove(&k);
        }
        check_all(&store, &model);
        for i in 0..n {
            let k = key(i);
            assert_eq!(
                store.get(&k).unwrap().as_deref(),
                model.get(&k).map(|v| &v[..]),
                "{i}"
            );
        }
        for i in 0..n {
            let k = key(i);
            store.delete(&k).unwrap();
            model.remove(&k);
        }
        check_all(&store, &model);
        store.collect();
        let c = store.node_counts();
        assert_eq!(c.live_buffers, c.reachable_buffers);
    }
}

#[test]
fn range_bounds_and_limits() {
    let store = Store::new(Config::with_node_size(1024)).unwrap();
    for i in 0..500u32 {
        store.put(format!("{:04}", i * 2).as_bytes(), b"x").unwrap();
    }
    let r = Range::new(
        Bound::Included(b"0100".to_vec()),
        Bound::Excluded(b"0110".to_vec()),
    );
    let keys: Vec<_> = store
        .range(&r)
        .unwrap()
        .into_iter()
        .map(|i| i.key)
        .collect();
    assert_eq!(keys, vec!["0100", "0102", "0104", "0106", "0108"]);
    let r = Range::new(Bound::Included(b"0101".to_vec()), Bound::Unbounded)
        .with_limit(2)
        .with_floor_start();
    let keys: Vec<_> = store
        .range(&r)
        .unwrap()
        .into_iter()
        .map(|i| i.key)
        .collect();
    assert_eq!(keys, vec!["0100", "0102"]);
    let r = Range::new(Bound::Unbounded, Bound::Included(b"0101".to_vec()))
        .with_limit(3)
        .reversed();
    let keys: Vec<_> = store
        .range(&r)
        .unwrap()
        .into_iter()
        .map(|i| i.key)
        .collect();
    assert_eq!(keys, vec!["0100", "0098", "0096"]);
    assert_eq!(store.floor(b"0555").unwrap().unwrap().key, "0554");
    assert_eq!(store.ceil(b"0555").unwrap().unwrap().key, "0556");
    assert!(store.floor(b"").is_err());
}

#[test]
fn expired_items_are_invisible_and_swept() {
    use combkv::Expiry;
    let store = Store::new(Config::with_node_size(1024)).unwrap();
    let past = combkv::now_ms() - 1000;
    for i in 0..300u32 {
        let k = format!("{i:04}");
        let e = if i % 2 == 0 {
            Expiry::AtMs(past)
        } else {
            Expiry::Never
        };
        store.put_with(k.as_bytes(), b"v", e).unwrap();
    }
    assert!(store.get(b"0000").unwrap().is_none());
    assert_eq!(store.range(&Range::all()).unwrap().len(), 150);
    assert!(
        store.insert(b"0000", b"again").unwrap().is_some(),
        "expired counts as absent"
    );
    let mut swept = 0;
    for _ in 0..10 {
        swept += store.sweep_expired(64);
    }
    assert_eq!(swept, 149);
    assert_eq!(store.range(&Range::all()).unwrap().len(), 151);
}

/// Emptying the store merges nodes away until little more than the root is
/// left (empty nodes go away; the tree shrinks).
#[test]
fn deleting_everything_shrinks_the_tree() {
    for (node, n) in [(1024, 5000u64), (8192, 50_000)] {
        let store = Store::new(Config::with_node_size(node)).unwrap();
        for i in 0..n {
            store.put(&key(i), b"value").unwrap();
        }
        store.collect();
        let full = store.node_counts().reachable_buffers;
        for i in 0..n {
            store.delete(&key(i)).unwrap();
        }
        store.collect();
        let empty = store.node_counts();
        assert!(store.range(&Range::all()).unwrap().is_empty());
        assert_eq!(empty.live_buffers, empty.reachable_buffers);
        assert!(
            empty.reachable_buffers * 20 < full,
            "{node}: {} buffers left of {full}",
            empty.reachable_buffers
        );
        eprintln!(
            "{node}: {full} buffers full, {} empty",
            empty.reachable_buffers
        );
    }
}

#[test]
fn len_counts_stored_keys_through_every_write() {
    let store = Store::new(Config::with_node_size(1024)).unwrap();
    assert!(store.is_empty());
    for i in 0..2_000 {
        store.put(&key(i), b"v").unwrap();
    }
    assert_eq!(store.len(), 2_000);
    // Overwrites, failed inserts, updates and CAS keep the count.
    store.put(&key(7), b"w").unwrap();
    assert!(store.insert(&key(8), b"x").unwrap().is_none());
    store.update(&key(9), b"y").unwrap();
    store.incr_by(b"counter", 1).unwrap();
    store.append(b"log", b"line").unwrap();
    assert_eq!(store.len(), 2_002);
    // Deletes of present keys count down; of absent keys do nothing.
    for i in 0..1_000 {
        assert!(store.delete(&key(i)).unwrap().is_some());
        assert!(store.delete(&key(i)).unwrap().is_none());
    }
    assert_eq!(store.len(), 1_002);
    // An expired key counts until the sweep removes it (DBSIZE semantics);
    // writing it again does not count it twice.
    let past = combkv::Expiry::AtMs(1);
    store.put_with(&key(1_500), b"gone", past).unwrap();
    store.put_with(&key(1_501), b"gone", past).unwrap();
    assert_eq!(store.len(), 1_002);
    store.put(&key(1_501), b"back").unwrap();
    assert_eq!(store.len(), 1_002);
    while store.sweep_expired(10_000) > 0 {}
    assert_eq!(store.len(), 1_001);

    // Concurrent writers on disjoint keys.
    let key = |i: u64| format!("t{i:08}").into_bytes();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let store = &store;
            let key = &key;
            s.spawn(move || {
                for i in 0..5_000 {
                    store.put(&key(100_000 + t * 10_000 + i), b"c").unwrap();
                }
                for i in 0..1_000 {
                    store.delete(&key(100_000 + t * 10_000 + i)).unwrap();
                }
            });
        }
    });
    assert_eq!(store.len(), 1_001 + 4 * 4_000);
    let counted = store.range(&Range::all()).unwrap().len() as u64;
    assert_eq!(store.len(), counted);
}

#[test]
fn write_with_decides_and_writes_atomically() {
    use combkv::{Expiry, Flags, Write};
    let store = Store::new(Config::with_node_size(1024)).unwrap();
    // Put only if absent, returning what was there.
    let (old, v) = store
        .write_with(b"k", |cur| match cur {
            None => (
                Write::Put {
                    value: b"1".to_vec(),
                    expiry: Expiry::Never,
                    flags: Flags::NONE,
                },
                None,
            ),
            Some(it) => (Write::Keep, Some(it.value.to_vec())),
        })
        .unwrap();
    assert_eq!((old, v.is_some()), (None, true));
    let (old, v) = store
        .write_with(b"k", |cur| (Write::Keep, cur.map(|it| it.value.to_vec())))
        .unwrap();
    assert_eq!((old.as_deref(), v), (Some(&b"1"[..]), None));
    // Keep the expiry while replacing the value.
    store.expire(b"k", Expiry::AtMs(u64::MAX / 2)).unwrap();
    store
        .write_with(b"k", |_| {
            (
                Write::Put {
                    value: b"2".to_vec(),
                    expiry: Expiry::Keep,
                    flags: Flags::Keep,
                },
                (),
            )
        })
        .unwrap();
    let it = store.get_item(b"k").unwrap().unwrap();
    assert_eq!(
        (&it.value[..], it.expires_at_ms),
        (&b"2"[..], Some(u64::MAX / 2))
    );
    // Delete returning the old value (GETDEL).
    let (old, _) = store
        .write_with(b"k", |cur| (Write::Delete, cur.map(|it| it.value.to_vec())))
        .unwrap();
    assert_eq!(old.as_deref(), Some(&b"2"[..]));
    assert_eq!(store.get(b"k").unwrap(), None);
    assert_eq!(store.len(), 0);
    // Limits are enforced and change nothing.
    let big = vec![0u8; store.max_value_len() + 1];
    let err = store
        .write_with(b"k", |_| {
            (
                Write::Put {
                    value: big.clone(),
                    expiry: Expiry::Never,
                    flags: Flags::NONE,
                },
                (),
            )
        })
        .unwrap_err();
    assert!(matches!(err, combkv::Error::ValueTooLarge { .. }));
    assert_eq!(store.get(b"k").unwrap(), None);
    assert!(store.write_with(b"", |_| (Write::Keep, ())).is_err());
}

/// Client flags (memcached's) live with the item through log appends,
/// merges and splits: `write_with` sets or keeps them, incr/append/expire
/// keep them, plain puts clear them.
#[test]
fn client_flags_are_stored_kept_and_cleared() {
    use combkv::{Expiry, Flags, Write};
    let store = Store::new(Config::with_node_size(1024)).unwrap();
    let put = |k: &[u8], v: &[u8], flags: Flags| {
        store
            .write_with(k, |_| {
                let w = Write::Put {
                    value: v.to_vec(),
                    expiry: Expiry::Keep,
                    flags,
                };
                (w, ())
            })
            .unwrap();
    };
    // Enough keys to split and merge the 1 KiB nodes many times.
    for i in 0..2000u64 {
        put(&key(i), b"7", Flags::Set(i as u32 * 3 + 1));
    }
    for i in (0..2000u64).step_by(3) {
        put(&key(i), b"8", Flags::Keep);
    }
    for i in 0..2000u64 {
        let it = store.get_item(&key(i)).unwrap().unwrap();
        assert_eq!(it.flags, i as u32 * 3 + 1, "key {i}");
    }
    let k = key(5);
    store.incr_by(&k, 1).unwrap();
    store.append(&k, b"0").unwrap();
    store.expire(&k, Expiry::AtMs(u64::MAX / 2)).unwrap();
    assert_eq!(store.get_item(&k).unwrap().unwrap().flags, 16);
    let scanned: Vec<u32> = store
        .range(&Range::all().with_limit(3))
        .unwrap()
        .iter()
        .map(|it| it.flags)
        .collect();
    assert!(scanned.iter().all(|&f| f != 0));
    put(&k, b"x", Flags::Set(0));
    assert_eq!(store.get_item(&k).unwrap().unwrap().flags, 0);
    put(&k, b"x", Flags::Set(u32::MAX));
    store.put(&k, b"y").unwrap();
    assert_eq!(store.get_item(&k).unwrap().unwrap().flags, 0);
    // Flags of an absent key: Keep means none.
    put(b"new", b"v", Flags::Keep);
    assert_eq!(store.get_item(b"new").unwrap().unwrap().flags, 0);
    // Read batches carry them too.
    put(b"new", b"v", Flags::Set(42));
    let mut out = combkv::readexec::BatchResults::new();
    store
        .read_batch(&[combkv::readexec::ReadRequest::Get(b"new")], &mut out)
        .unwrap();
    assert_eq!(out.items(0).next().unwrap().flags, 42);
}

/// Nodes whose keys all share a long prefix search with the bytes after it
/// (`Header::prefix_skip`); keys that differ inside the prefix, are a
/// prefix of it, or run past it must still land in the right place.
#[test]
fn shared_key_prefixes_search_correctly() {
    for node in [1024, 8192] {
        let store = Store::new(Config::with_node_size(node)).unwrap();
        let mut model = BTreeMap::new();
        for i in 0..20_000u64 {
            let k = format!("key:{:012}", (i * 7919) % 1_000_003).into_bytes();
            store.put(&k, &i.to_le_bytes()).unwrap();
            model.insert(k, i.to_le_bytes().to_vec());
        }
        for extra in [
            "key:",
            "key:0",
            "key:000000",
            "kez",
            "ke",
            "a",
            "key;",
            "key:9",
        ] {
            store.put(extra.as_bytes(), b"x").unwrap();
            model.insert(extra.as_bytes().to_vec(), b"x".to_vec());
        }
        check_all(&store, &model);
        let probes = [
            "key:",
            "key:00000",
            "key:000000500000",
            "key:0000009",
            "kex",
            "kez",
            "key;",
            "z",
            "key:000000999999~",
        ];
        for p in probes {
            let p = p.as_bytes();
            let want_floor = model
                .range(..=p.to_vec())
                .next_back()
                .map(|(k, _)| k.clone());
            let got_floor = store.floor(p).unwrap().map(|it| it.key.to_vec());
            assert_eq!(
                got_floor,
                want_floor,
                "floor {:?}",
                String::from_utf8_lossy(p)
            );
            let want_ceil = model.range(p.to_vec()..).next().map(|(k, _)| k.clone());
            let got_ceil = store.ceil(p).unwrap().map(|it| it.key.to_vec());
            assert_eq!(got_ceil, want_ceil, "ceil {:?}", String::from_utf8_lossy(p));
            assert_eq!(
                store.get(p).unwrap().map(|v| v.to_vec()),
                model.get(p).cloned()
            );
        }
    }
}

/// Results gathered from two stores' batches (a keyspace cut into ranges)
/// read as those batches did: keys, values (copied, and a large one
/// shared), versions, in order, each request's items together, a limit
/// counted across them.
#[test]
fn batch_results_gathered_from_two_stores_read_as_theirs() {
    use combkv::readexec::{BatchResults, ReadRequest};
    let low = Store::new(Config::with_node_size(1024)).unwrap();
    let high = Store::new(Config::with_node_size(1024)).unwrap();
    let big = vec![b'x'; 64 << 10];
    for i in 0..10u8 {
        low.put(&[b'a', i], &[i]).unwrap();
        high.put(&[b'm', i], &[i, i]).unwrap();
    }
    high.put(b"mbig", &big).unwrap();
    let all = Range::all();
    let (mut a, mut b, mut out) = (
        BatchResults::new(),
        BatchResults::new(),
        BatchResults::new(),
    );
    low.read_batch(&[ReadRequest::Range(&all)], &mut a).unwrap();
    high.read_batch(
        &[ReadRequest::Get(b"mbig"), ReadRequest::Range(&all)],
        &mut b,
    )
    .unwrap();
    out.begin_gathering(3);
    assert_eq!(out.gather(0, &b, 0, usize::MAX), 1);
    assert_eq!(out.gather(1, &a, 0, 12), 10);
    assert_eq!(out.gather(1, &b, 1, 2), 2, "what is left of the limit");
    assert_eq!(out.gather(2, &a, 0, 0), 0);
    assert_eq!(out.len(), 3);
    assert_eq!(out.value(0), Some(&big[..]));
    let got: Vec<(Vec<u8>, Vec<u8>, combkv::Version)> = out
        .items(1)
        .map(|it| (it.key.to_vec(), it.value.to_vec(), it.version))
        .collect();
    let want: Vec<_> = a
        .items(0)
        .chain(b.items(1).take(2))
        .map(|it| (it.key.to_vec(), it.value.to_vec(), it.version))
        .collect();
    assert_eq!(got, want);
    assert_eq!(out.items(2).len(), 0);
}
