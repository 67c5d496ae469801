//! Deterministic concurrency tests: shuttle explores thread schedules of the
//! write-release protocol and of reclamation, with replayable seeds.
//! Run: `cargo test -p combkv --features shuttle --test shuttle -- --test-threads 1`
//! (epochs are process-wide; one test at a time keeps quiescence checks exact).
//!
//! In shuttle builds every engine atomic and lock is shuttle's (`crate::sync`),
//! node-header steps are schedule points, and freed buffers are poisoned
//! instead of returned to the allocator, so a schedule in which a reader
//! touches a freed buffer panics.
#![cfg(feature = "shuttle")]

use std::collections::BTreeMap;
use std::ops::Bound;
use std::time::Duration;

use combkv::{AtomicWrite, Config, Expiry, Range, Store};
use shuttle::sync::Arc;
use shuttle::sync::atomic::{AtomicU64, Ordering};
use shuttle::thread;

const ITERATIONS: usize = 500;

fn small_store() -> Arc<Store> {
    Arc::new(Store::new(Config::with_node_size(1024)).unwrap())
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:03}").into_bytes()
}

/// A thread that runs reclamation work until `done` reaches 2 (both other
/// threads finished), so unlinking happens while readers walk chains.
fn spawn_collector(store: &Arc<Store>, done: &Arc<AtomicU64>) -> thread::JoinHandle<()> {
    let (store, done) = (store.clone(), done.clone());
    thread::spawn(move || {
        for _ in 0..40 {
            if done.load(Ordering::SeqCst) == 2 {
                break;
            }
            store.collect();
            thread::yield_now();
        }
    })
}

/// Release protocol: a write acknowledged before a read starts is visible to
/// it, and a read never sees a later write without the earlier ones of the
/// same writer (in-order release).
#[test]
fn acknowledged_writes_are_visible_in_order() {
    shuttle::check_random(
        || {
            let store = small_store();
            let acked = Arc::new(AtomicU64::new(0));
            let writers: Vec<_> = (0..2u64)
                .map(|w| {
                    let store = store.clone();
                    let acked = acked.clone();
                    thread::spawn(move || {
                        for i in 0..4u64 {
                            store.put(&key(w * 100 + i), b"v").unwrap();
                            if w == 0 {
                                acked.store(i + 1, Ordering::SeqCst);
                            }
                        }
                    })
                })
                .collect();
            let reader = {
                let store = store.clone();
                let acked = acked.clone();
                thread::spawn(move || {
                    for _ in 0..4 {
                        let n = acked.load(Ordering::SeqCst);
                        let items = store.range(&Range::all()).unwrap();
                        let mine: Vec<_> = items
                            .iter()
                            .filter(|i| i.key.starts_with(b"key0"))
                            .collect();
                        // Writer 0's keys appear as a prefix of its sequence,
                        // at least as long as what it had acknowledged.
                        assert!(mine.len() as u64 >= n, "acknowledged write missing");
                        for (j, it) in mine.iter().enumerate() {
                            assert_eq!(
                                &it.key[..],
                                &key(j as u64)[..],
                                "writes released out of order"
                            );
                        }
                    }
                })
            };
            for w in writers {
                w.join().unwrap();
            }
            reader.join().unwrap();
            assert!(store.read_version().get() >= 8);
        },
        ITERATIONS,
    );
}

/// Atomic groups (MSET): while one thread writes groups and another
/// writes single keys (taking versions inside the groups' spans), a reader
/// sees every group whole or not at all, and acknowledged single writes stay
/// visible. Explores the clock's group paths: the held read version, the
/// one-step jump over a span, the fast path meeting a group being opened.
#[test]
fn groups_are_released_whole() {
    shuttle::check_random(
        || {
            let store = small_store();
            let acked = Arc::new(AtomicU64::new(0));
            let grouper = {
                let store = store.clone();
                thread::spawn(move || {
                    for round in 1..=3u8 {
                        let v = [b'0' + round; 4];
                        let keys = [key(1), key(5), key(9)];
                        let ws: Vec<_> = keys
                            .iter()
                            .map(|k| AtomicWrite::Put {
                                key: k,
                                value: &v,
                                expiry: Expiry::Never,
                            })
                            .collect();
                        store.write_atomically(&ws).unwrap();
                    }
                })
            };
            let single = {
                let (store, acked) = (store.clone(), acked.clone());
                thread::spawn(move || {
                    for i in 0..4u64 {
                        store.put(&key(100 + i), b"s").unwrap();
                        acked.store(i + 1, Ordering::SeqCst);
                    }
                })
            };
            let reader = {
                let (store, acked) = (store.clone(), acked.clone());
                thread::spawn(move || {
                    for _ in 0..3 {
                        let n = acked.load(Ordering::SeqCst);
                        let items = store.range(&Range::all()).unwrap();
                        let group: Vec<u8> = items
                            .iter()
                            .filter(|i| i.key.starts_with(b"key00"))
                            .map(|i| i.value[0])
                            .collect();
                        assert!(
                            group.is_empty()
                                || (group.len() == 3 && group.iter().all(|&r| r == group[0])),
                            "torn group {group:?}"
                        );
                        let singles = items.iter().filter(|i| i.key.starts_with(b"key1")).count();
                        assert!(singles as u64 >= n, "acknowledged write missing");
                    }
                })
            };
            grouper.join().unwrap();
            single.join().unwrap();
            reader.join().unwrap();
            let items = store.range(&Range::all()).unwrap();
            assert_eq!(items.len(), 7);
            assert!(
                items
                    .iter()
                    .filter(|i| i.key.starts_with(b"key00"))
                    .all(|i| i.value[..] == [b'3'; 4])
            );
        },
        ITERATIONS,
    );
}

/// Transactions (`Op::Txn`) against a plain writer and a reader: two
/// threads' transactions each read `a`, increment it, and increment `t1`
/// and `t2`, while a plain writer increments `a` too and a reader scans.
/// Isolation: the `a` a transaction's increment left is the `a` it read
/// plus one (no other write landed between them); atomicity: every scan
/// sees `t1` = `t2`. Every increment lands once.
#[test]
fn transactions_are_isolated_and_released_whole() {
    use combkv::op::{Arith, Cond, OnMissing, Op, Outcome};
    use std::borrow::Cow;

    fn incr(key: &[u8]) -> Op<'_> {
        Op::Incr {
            key,
            arith: Arith::Signed(1),
            on_missing: OnMissing::Empty,
            cond: Cond::Any,
            expiry: Expiry::Keep,
        }
    }
    shuttle::check_random(
        || {
            let store = small_store();
            store.put(b"a", b"0").unwrap();
            store.put(b"t1", b"0").unwrap();
            store.put(b"t2", b"0").unwrap();
            let txns: Vec<_> = (0..2)
                .map(|_| {
                    let store = store.clone();
                    thread::spawn(move || {
                        for _ in 0..2 {
                            let ops = [
                                Op::Read {
                                    keys: Cow::Borrowed(&[&b"a"[..]]),
                                },
                                incr(b"a"),
                                incr(b"t1"),
                                incr(b"t2"),
                            ];
                            let out = store
                                .apply(&Op::Txn {
                                    watch: Cow::Borrowed(&[]),
                                    ops: Cow::Borrowed(&ops),
                                })
                                .unwrap();
                            let Outcome::Txn { results: Some(r) } = out else {
                                panic!("{out:?}")
                            };
                            let Ok(Outcome::Read { items }) = &r[0] else {
                                panic!("{r:?}")
                            };
                            let a: i64 = std::str::from_utf8(&items[0].as_ref().unwrap().value)
                                .unwrap()
                                .parse()
                                .unwrap();
                            let Ok(Outcome::Incr { number, .. }) = &r[1] else {
                                panic!("{r:?}")
                            };
                            assert_eq!(
                                *number,
                                combkv::op::Number::Signed(a + 1),
                                "a write landed inside a transaction"
                            );
                        }
                    })
                })
                .collect();
            let plain = {
                let store = store.clone();
                thread::spawn(move || {
                    for _ in 0..2 {
                        store.incr_by(b"a", 1).unwrap();
                    }
                })
            };
            let reader = {
                let store = store.clone();
                thread::spawn(move || {
                    for _ in 0..3 {
                        let items = store.range(&Range::all()).unwrap();
                        let num = |k: &[u8]| -> i64 {
                            let it = items.iter().find(|i| i.key[..] == *k).unwrap();
                            std::str::from_utf8(&it.value).unwrap().parse().unwrap()
                        };
                        assert_eq!(num(b"t1"), num(b"t2"), "a scan saw part of a transaction");
                    }
                })
            };
            for t in txns {
                t.join().unwrap();
            }
            plain.join().unwrap();
            reader.join().unwrap();
            assert_eq!(store.get(b"a").unwrap().unwrap().as_ref(), b"6");
            assert_eq!(store.get(b"t1").unwrap().unwrap().as_ref(), b"4");
            assert_eq!(store.get(b"t2").unwrap().unwrap().as_ref(), b"4");
        },
        ITERATIONS,
    );
}

/// A group's delete that finds its key already deleted by another thread
/// saw that thread's write, whose version may be above every version the
/// group took and not yet complete: the group must not be released before
/// it. Any state a reader sees with the group's put must lack the deleted
/// key, whichever delete removed it. (The linearizability stress check
/// found a reader between the two; the group's span now reaches the newest
/// version its decisions saw. Without that, 2,000 schedules found the fault
/// in 2 runs of 5; this runs 20,000.)
#[test]
fn a_group_is_released_with_the_writes_it_saw() {
    shuttle::check_pct(
        || {
            let store = small_store();
            store.put(&key(5), b"old").unwrap();
            let grouper = {
                let store = store.clone();
                thread::spawn(move || {
                    let (g, k) = (key(1), key(5));
                    let ws = [
                        AtomicWrite::Put {
                            key: &g,
                            value: b"g",
                            expiry: Expiry::Never,
                        },
                        AtomicWrite::Delete { key: &k },
                    ];
                    store.write_atomically(&ws).unwrap();
                })
            };
            let deleter = {
                let store = store.clone();
                thread::spawn(move || {
                    store.delete(&key(5)).unwrap();
                })
            };
            let reader = {
                let store = store.clone();
                thread::spawn(move || {
                    for _ in 0..6 {
                        let items = store.range(&Range::all()).unwrap();
                        let has = |k: &[u8]| items.iter().any(|i| i.key[..] == *k);
                        assert!(
                            !(has(&key(1)) && has(&key(5))),
                            "the group's put is visible, the key it deleted too"
                        );
                    }
                })
            };
            grouper.join().unwrap();
            deleter.join().unwrap();
            reader.join().unwrap();
            assert!(store.get(&key(5)).unwrap().is_none());
        },
        ITERATIONS * 40,
        3,
    );
}

/// Reclamation: readers (plain and at a snapshot) keep reading buffers that
/// writers replace through merges and splits; no schedule lets a reader touch
/// a freed buffer, every read matches a state the writes produced, and once
/// quiescent every allocated buffer is reachable.
#[test]
fn readers_hold_old_buffers_while_writers_replace_them() {
    shuttle::check_random(
        || {
            let store = small_store();
            for i in 0..12 {
                store.put(&key(i), &[b'0'; 8]).unwrap();
            }
            let snap = store.snapshot(Duration::from_secs(600)).unwrap();
            let writer = {
                let store = store.clone();
                thread::spawn(move || {
                    for round in 1..=3u8 {
                        for i in 0..12 {
                            store.put(&key(i), &[b'0' + round; 8]).unwrap();
                        }
                        store.delete(&key(round as u64)).unwrap();
                    }
                })
            };
            let reader = {
                let store = store.clone();
                thread::spawn(move || {
                    for _ in 0..3 {
                        let items = store.range(&Range::all()).unwrap();
                        // One consistent state: values never go backwards along the keys
                        // written in order within a round.
                        let rounds: Vec<u8> = items.iter().map(|i| i.value[0]).collect();
                        assert!(
                            rounds.windows(2).all(|w| w[0] >= w[1]),
                            "torn range {rounds:?}"
                        );
                        let old = store.range_at(snap, &Range::all()).unwrap();
                        assert_eq!(old.len(), 12);
                        assert!(old.iter().all(|i| i.value[..] == [b'0'; 8]));
                    }
                })
            };
            // Reclamation work runs beside the readers (writers also trigger it
            // every few hundred writes; here it must happen mid-read).
            let done = Arc::new(AtomicU64::new(0));
            let collector = spawn_collector(&store, &done);
            writer.join().unwrap();
            done.fetch_add(1, Ordering::SeqCst);
            reader.join().unwrap();
            done.fetch_add(1, Ordering::SeqCst);
            collector.join().unwrap();
            let mut model = BTreeMap::new();
            for i in 0..12u64 {
                model.insert(key(i), vec![b'3'; 8]);
            }
            // Each round rewrites every key, so only the last round's delete remains.
            model.remove(&key(3));
            let all = store.range(&Range::all()).unwrap();
            let got: BTreeMap<Vec<u8>, Vec<u8>> = all
                .into_iter()
                .map(|i| (i.key.to_vec(), i.value.to_vec()))
                .collect();
            assert_eq!(got, model);
            let r = Range::new(Bound::Included(key(0)), Bound::Excluded(key(5)));
            assert_eq!(store.range_at(snap, &r).unwrap().len(), 5);
            assert!(store.release_snapshot(snap));
            // Epochs are process-wide: another test's pinned thread can delay
            // the grace period, so give quiescence a few rounds.
            let mut c = store.node_counts();
            for _ in 0..100 {
                store.collect();
                c = store.node_counts();
                if c.live_buffers == c.reachable_buffers {
                    break;
                }
            }
            assert_eq!(
                c.live_buffers, c.reachable_buffers,
                "reclamation incomplete"
            );
        },
        ITERATIONS,
    );
}

/// Reclamation, focused: a snapshot reader walks a long old-version chain of
/// one node while a writer keeps replacing the node and a collector unlinks
/// the middle of the chain. The reader must always reach the snapshot's
/// buffer through live buffers only.
#[test]
fn snapshot_reader_walks_a_chain_being_unlinked() {
    shuttle::check_random(
        || {
            let store = small_store();
            store.put(b"k", b"v0").unwrap();
            let snap = store.snapshot(Duration::from_secs(600)).unwrap();
            let done = Arc::new(AtomicU64::new(0));
            let writer = {
                let store = store.clone();
                thread::spawn(move || {
                    // 24-byte values: every third write merges the log into a
                    // new buffer, so the chain grows by one buffer each time.
                    for i in 1..=24u32 {
                        store.put(b"k", format!("v{i:023}").as_bytes()).unwrap();
                    }
                })
            };
            let reader = {
                let store = store.clone();
                thread::spawn(move || {
                    for _ in 0..12 {
                        let old = store.get_at(snap, b"k").unwrap().unwrap();
                        assert_eq!(&old.value[..], b"v0");
                        let now = store.get(b"k").unwrap().unwrap();
                        assert!(now.starts_with(b"v"));
                    }
                })
            };
            let collector = spawn_collector(&store, &done);
            writer.join().unwrap();
            done.fetch_add(1, Ordering::SeqCst);
            reader.join().unwrap();
            done.fetch_add(1, Ordering::SeqCst);
            collector.join().unwrap();
            assert!(store.release_snapshot(snap));
        },
        ITERATIONS,
    );
}
