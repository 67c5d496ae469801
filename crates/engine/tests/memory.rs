//! `Store::memory`, what `maxmemory` is judged by: it counts the node
//! buffers and the out-of-line values the store holds, and falls back to
//! the empty store's figure once what deletes, a clear and overwrites left
//! behind is reclaimed, by `Store::reclaim` alone (what the server's
//! housekeeping calls), with no further write. The process's resident size
//! does not: freed node buffers stay mapped for reuse.

use std::sync::Arc;
use std::time::{Duration, Instant};

use combkv::durable::FaultyStorage;
use combkv::{Config, DurableConfig, MemoryUsage, Store};

const BIG: usize = 4096;
const SMALL: usize = 100;
/// What one out-of-line value counts: its bytes, the count of buffers that
/// reference it and the `Arc`'s two counts.
const BIG_COUNTED: u64 = BIG as u64 + 8 + 16;

fn key(kind: &str, i: usize) -> Vec<u8> {
    format!("{kind}:{i:08}").into_bytes()
}

/// Calls `reclaim` until `done` holds (or fails after 10 s: the epoch is
/// process-wide, and other tests' threads may hold it back a while).
fn reclaim_until(store: &Store, what: &str, done: impl Fn(&MemoryUsage) -> bool) -> MemoryUsage {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        store.reclaim();
        let m = store.memory();
        if done(&m) {
            return m;
        }
        assert!(Instant::now() < deadline, "{what}: still {m:?} after 10 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn memory_counts_nodes_and_values_and_falls_back_once_deletes_are_reclaimed() {
    let store = Store::new(Config::default()).unwrap();
    let empty = store.memory();
    assert_eq!(empty.value_bytes, 0);
    // Each buffer counts its size class's bytes: more than nothing, at
    // most a whole node (the exact sum is checked inside the crate, by the
    // footprint walk's test).
    assert!(empty.node_buffers > 0 && empty.node_bytes > 0, "{empty:?}");
    assert!(
        empty.node_bytes <= empty.node_buffers as u64 * Config::default().node_size_bytes as u64,
        "{empty:?}"
    );

    let (nbig, nsmall) = (2_000, 20_000);
    for i in 0..nbig {
        store.put(&key("big", i), &vec![b'b'; BIG]).unwrap();
    }
    for i in 0..nsmall {
        store.put(&key("small", i), &[b's'; SMALL]).unwrap();
    }
    // Every out-of-line value counts once, at once: also while the leaves
    // that merges replaced, which reference the same values, wait for
    // their grace period.
    let full = store.memory();
    assert_eq!(full.value_bytes, nbig as u64 * BIG_COUNTED, "{full:?}");
    // The inline values live in the nodes.
    assert!(
        full.node_bytes >= (nsmall * SMALL) as u64,
        "{full:?} holds less than the inline values"
    );

    // Half the keys deleted one by one, the rest by a clear.
    for i in (0..nbig).step_by(2) {
        store.delete(&key("big", i)).unwrap();
    }
    for i in (0..nsmall).step_by(2) {
        store.delete(&key("small", i)).unwrap();
    }
    // A deleted value stays until a merge of its leaf drops it and the
    // leaf's old buffer is freed; never counted more than once meanwhile.
    let halved = reclaim_until(&store, "after deleting half", |m| {
        m.value_bytes < full.value_bytes
    });
    assert!(
        halved.value_bytes >= (nbig as u64 / 2) * BIG_COUNTED,
        "{halved:?}"
    );
    store.clear().unwrap();
    assert_eq!(store.len(), 0);
    let after = reclaim_until(&store, "after the clear", |m| {
        m.value_bytes == 0 && m.node_buffers <= empty.node_buffers + 2
    });
    assert!(after.total() <= empty.total() + 2 * 8192, "{after:?}");

    // The room is there again: the same load fits in the same figure.
    for i in 0..nbig {
        store.put(&key("big", i), &vec![b'b'; BIG]).unwrap();
    }
    assert_eq!(store.memory().value_bytes, nbig as u64 * BIG_COUNTED);
}

/// Overwrites of one key leave old versions in its leaf until the leaf is
/// merged and the old buffer reclaimed: the figure follows the live data,
/// not the history of writes.
#[test]
fn overwrites_are_counted_until_reclaimed_not_forever() {
    let store = Store::new(Config::default()).unwrap();
    for round in 0..5_000u32 {
        let mut v = vec![b'v'; BIG];
        v[..4].copy_from_slice(&round.to_le_bytes());
        store.put(b"hot", &v).unwrap();
    }
    // A leaf's log block holds a few dozen versions before a merge drops
    // them; 5,000 versions never all count.
    let m = reclaim_until(&store, "after 5,000 overwrites", |m| {
        m.value_bytes <= 100 * BIG_COUNTED
    });
    assert!(m.value_bytes >= BIG_COUNTED, "{m:?}");
    store.delete(b"hot").unwrap();
    store.clear().unwrap();
    reclaim_until(&store, "after deleting it", |m| m.value_bytes == 0);
}

/// A store recovered from a checkpoint (bulk loaded) and its log (replayed
/// writes) counts what it loaded, and gives it back alike.
#[test]
fn a_recovered_store_counts_what_it_loaded() {
    let fs = FaultyStorage::new(7);
    let cfg = DurableConfig {
        storage: Arc::new(fs.clone()),
        ..DurableConfig::new("/data")
    };
    let store = Store::open(Config::default(), cfg.clone()).unwrap().0;
    for i in 0..500 {
        store.put(&key("big", i), &vec![b'b'; BIG]).unwrap();
    }
    store.checkpoint().unwrap();
    for i in 500..1_000 {
        store.put(&key("big", i), &vec![b'b'; BIG]).unwrap();
    }
    drop(store);
    let (store, report) = Store::open(Config::default(), cfg).unwrap();
    assert!(report.checkpoint.is_some() && report.records_replayed >= 500);
    assert_eq!(store.memory().value_bytes, 1_000 * BIG_COUNTED);
    store.clear().unwrap();
    reclaim_until(&store, "after a clear of the recovered store", |m| {
        m.value_bytes == 0
    });
}

/// Overwrites of one key with 1 MB values, and no `reclaim`: writers
/// collect after every 8 MiB of new out-of-line values as well as every
/// 256th write, handing their epoch bag on, so what the store holds stays
/// within a few dozen values. Before, each overwrite's value stayed until
/// 64 replaced leaves filled the writer's bag: 300 overwrites held about
/// 300 MB.
#[test]
fn overwrites_of_a_large_value_stay_bounded_without_reclaim() {
    let store = Store::new(Config::default()).unwrap();
    let value = vec![7u8; 1 << 20];
    let mut most = 0;
    for _ in 0..300 {
        store.put(b"big", &value).unwrap();
        most = most.max(store.memory().value_bytes);
    }
    // Generous: the epoch is process-wide, and other tests' threads may
    // hold it back a while.
    assert!(most < 128 << 20, "held up to {most} bytes of values");
}

#[test]
fn an_offered_value_stored_without_a_copy_counts_once_and_is_released_once() {
    let store = Store::new(Config::default()).unwrap();
    let empty = store.memory();
    let bytes: Vec<u8> = (0..BIG).map(|i| (i * 31) as u8).collect();
    let mut buf = combkv::ValueBuf::new(BIG);
    assert_eq!(buf.extend_from_slice(&bytes), BIG);
    let received = buf.finish().expect("full");
    let offer = received.offer();
    store.put(b"adopted", received.as_bytes()).unwrap();
    assert!(offer.taken(), "the put stores the offered allocation");
    drop(offer);
    // The same bytes again, while the store holds them: copied.
    let again = received.offer();
    store.put(b"copied", received.as_bytes()).unwrap();
    assert!(!again.taken());
    drop(again);
    let m = store.memory();
    assert_eq!(m.value_bytes, 2 * BIG_COUNTED, "{m:?}");
    assert_eq!(store.get(b"adopted").unwrap().unwrap(), bytes);
    assert_eq!(store.get(b"copied").unwrap().unwrap(), bytes);
    // The receiver lets go first; the store's reference keeps the bytes.
    drop(received);
    assert_eq!(store.get(b"adopted").unwrap().unwrap(), bytes);
    store.delete(b"adopted").unwrap();
    store.delete(b"copied").unwrap();
    reclaim_until(&store, "after deleting both", |m| {
        m.value_bytes == empty.value_bytes
    });
}
