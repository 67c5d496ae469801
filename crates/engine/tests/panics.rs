//! A `write_with` decision that panics runs with its key's leaf locked
//! against other writers. The panic must unlock it: later writes to the
//! same key and to its leaf neighbours complete. Each later write runs on a
//! thread and must finish within a bound, so a leaf left locked fails the
//! test instead of hanging it (every writer to a locked leaf spins until it
//! is unlocked).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use combkv::durable::FaultyStorage;
use combkv::{Config, DurableConfig, Store, Write};

const BOUND: Duration = Duration::from_secs(10);

/// Runs `f` on a thread; fails the test if it has not returned within
/// `BOUND`.
fn within_bound<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(BOUND)
        .unwrap_or_else(|_| panic!("{what} did not finish within {BOUND:?}: a leaf stayed locked"))
}

/// `key`'s write_with decision panics; then a put of `key` and of
/// `neighbour` (in the same leaf) must complete, as must a session's.
fn a_panicking_decision_leaves_the_leaf_unlocked(store: Arc<Store>) {
    store.put(b"key1", b"before").unwrap();
    store.put(b"key2", b"before").unwrap();
    let died = catch_unwind(AssertUnwindSafe(|| {
        store.write_with(b"key1", |_| -> (Write, ()) {
            panic!("the decision panics with the leaf locked")
        })
    }));
    assert!(died.is_err(), "the decision's panic reaches the caller");
    assert_eq!(store.get(b"key1").unwrap().unwrap(), &b"before"[..]);
    let s = Arc::clone(&store);
    within_bound(
        "a write to the same key and one to its leaf neighbour",
        move || {
            s.put(b"key1", b"after").unwrap();
            s.put(b"key2", b"after").unwrap();
            let session = s.session();
            session.put(b"key1", b"session").unwrap();
            session.commit().unwrap();
        },
    );
    assert_eq!(store.get(b"key1").unwrap().unwrap(), &b"session"[..]);
    assert_eq!(store.get(b"key2").unwrap().unwrap(), &b"after"[..]);
}

#[test]
fn a_panicking_write_with_decision_unlocks_its_leaf() {
    let store = Store::new(Config::with_node_size(1024)).unwrap();
    a_panicking_decision_leaves_the_leaf_unlocked(Arc::new(store));
}

/// The same through the write-ahead log (versions taken through its hook,
/// acknowledgements after the fsync).
#[test]
fn a_panicking_write_with_decision_unlocks_its_leaf_in_a_durable_store() {
    let fs = FaultyStorage::new(11);
    let config = DurableConfig {
        storage: Arc::new(fs.clone()),
        ..DurableConfig::new("/data")
    };
    let (store, _) = Store::open(Config::with_node_size(1024), config).unwrap();
    let store = Arc::new(store);
    a_panicking_decision_leaves_the_leaf_unlocked(Arc::clone(&store));
    store.shutdown().unwrap();
    drop(store);
    let config = DurableConfig {
        storage: Arc::new(fs),
        ..DurableConfig::new("/data")
    };
    let (store, _) = Store::open(Config::with_node_size(1024), config).unwrap();
    assert_eq!(store.get(b"key1").unwrap().unwrap(), &b"session"[..]);
}
