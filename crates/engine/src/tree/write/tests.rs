//! A writer that unwinds (a panic in its decision, or in the write path
//! after it took its version) leaves no lock and no incomplete version
//! behind: later writes to its key and its leaf complete and are released.
//! Each later write runs on a thread and must finish within a bound, so a
//! leftover lock or version fails the test instead of hanging it.

use std::borrow::Cow;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use super::{WriteMode, WriteOp, fault};
use crate::config::Geometry;
use crate::tree::Tree;
use crate::types::Now;

/// How long a write may take before the test calls it stuck.
const BOUND: Duration = Duration::from_secs(10);

pub(crate) fn tree() -> Arc<Tree> {
    Arc::new(Tree::new(Geometry::new(1024)))
}

const LOGGED: WriteMode<'static> = WriteMode {
    now: None,
    logged: true,
};

/// Puts `value` under `key`; returns the version the answer waits for.
pub(crate) fn put(tree: &Tree, key: &[u8], value: &[u8]) -> u64 {
    let value = value.to_vec();
    let w = tree.write(key, LOGGED, |_| {
        let op = WriteOp::Put {
            value: Cow::Owned(value.clone()),
            expiry: 0,
            flags: 0,
        };
        (op, ())
    });
    w.wait_for
}

/// The value of `key` at the read version.
pub(crate) fn get(tree: &Tree, key: &[u8]) -> Option<Vec<u8>> {
    let _pin = tree.pin();
    let rv = tree.read_version();
    tree.get_at(key, rv)
        .filter(|it| it.is_live(&Now::lazy()))
        .map(|it| it.value.bytes().to_vec())
}

/// Runs `f` on a thread; fails the test if it has not returned within
/// `BOUND` (a lock or a version left behind makes it spin for good).
pub(crate) fn within_bound<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(BOUND)
        .unwrap_or_else(|_| panic!("{what} did not finish within {BOUND:?}"))
}

/// Puts `key` and `neighbour` (same leaf) on a thread and waits for their
/// release, within the bound.
fn later_writes_complete(tree: &Arc<Tree>, key: &'static [u8], neighbour: &'static [u8]) {
    let t = Arc::clone(tree);
    within_bound(
        "later writes to the key and its leaf neighbour",
        move || {
            for k in [key, neighbour] {
                let v = put(&t, k, b"after");
                assert!(t.wait_released(v), "write to {k:?} never released");
            }
        },
    );
    assert_eq!(get(tree, key).as_deref(), Some(&b"after"[..]));
    assert_eq!(get(tree, neighbour).as_deref(), Some(&b"after"[..]));
}

#[test]
fn a_panic_in_the_decision_unlocks_the_leaf() {
    let tree = tree();
    put(&tree, b"k1", b"before");
    put(&tree, b"k2", b"before");
    let died = catch_unwind(AssertUnwindSafe(|| {
        tree.write(b"k1", LOGGED, |_| -> (WriteOp<'static>, ()) {
            panic!("the decision panics with the leaf locked")
        })
    }));
    assert!(died.is_err());
    assert_eq!(get(&tree, b"k1").as_deref(), Some(&b"before"[..]));
    later_writes_complete(&tree, b"k1", b"k2");
}

#[test]
fn a_writer_unwinding_after_its_log_append_took_a_version_leaves_nothing_behind() {
    let tree = tree();
    put(&tree, b"k1", b"before");
    put(&tree, b"k2", b"before");
    fault::arm("append");
    let died = catch_unwind(AssertUnwindSafe(|| put(&tree, b"k1", b"lost")));
    assert!(died.is_err(), "the append's fault point was not reached");
    // Never published: the old value stands, and the version the dead
    // writer took does not hold the release of later writes back.
    assert_eq!(get(&tree, b"k1").as_deref(), Some(&b"before"[..]));
    later_writes_complete(&tree, b"k1", b"k2");
    tree.check_layout().unwrap();
}

/// Writes until one reaches the armed fault point and panics; returns how
/// many writes that took.
fn write_until_the_fault(tree: &Tree, point: &'static str, key: impl Fn(u32) -> Vec<u8>) -> u32 {
    fault::arm(point);
    for i in 0..10_000 {
        let k = key(i);
        if catch_unwind(AssertUnwindSafe(|| put(tree, &k, b"value"))).is_err() {
            return i;
        }
    }
    panic!("no write reached the fault point {point}");
}

#[test]
fn a_writer_unwinding_before_it_published_a_leaf_merge_leaves_nothing_behind() {
    let tree = tree();
    put(&tree, b"k2", b"before");
    // Rewrites of one key fill the leaf's log; the next one merges.
    write_until_the_fault(&tree, "merge", |_| b"k1".to_vec());
    later_writes_complete(&tree, b"k1", b"k2");
    tree.check_layout().unwrap();
}

#[test]
fn a_writer_unwinding_before_it_published_a_split_leaves_nothing_behind() {
    let tree = tree();
    let key = |i: u32| format!("key{i:05}").into_bytes();
    let n = write_until_the_fault(&tree, "restructure", key);
    // The keys written before the one that died are all there.
    for i in 0..n {
        assert_eq!(get(&tree, &key(i)).as_deref(), Some(&b"value"[..]));
    }
    assert_eq!(get(&tree, &key(n)), None, "the split never published");
    let t = Arc::clone(&tree);
    within_bound("writes into the leaf that was splitting", move || {
        for i in 0..=n + 50 {
            let v = put(&t, &key(i), b"after");
            assert!(t.wait_released(v));
        }
    });
    tree.check_layout().unwrap();
}
