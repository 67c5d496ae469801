//! A base written at advancing versions while a writer runs: recovery
//! from it and the log comes to the writer's state (every write, under
//! `Always`), and under `None`, whose log is not synced, to the state
//! after some prefix of the writes, never a mix of a chunk's later writes
//! with an earlier chunk's older items, and never part of an atomic group
//! whose keys two chunks read on either side of it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::*;
use crate::durable::{DurableConfig, FaultyStorage};
use crate::{AtomicWrite, Config, Durability, Expiry, Range, Store};

/// Keys the writer draws from; the fill writes the first `FILLED`.
const KEYS: usize = 1000;
const FILLED: usize = 800;

/// How long a test waits for the writer and a checkpoint to interleave as
/// it needs (a few milliseconds on an idle machine).
const RACE_WAIT: Duration = Duration::from_secs(60);

type State = BTreeMap<Vec<u8>, Vec<u8>>;
/// A write: the keys it changes, each with its value (None: a delete);
/// two keys for an atomic group.
type Op = Vec<(usize, Option<Vec<u8>>)>;

fn key(i: usize) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// Values of 300 bytes, so that the store is several blocks.
fn value(i: usize, n: usize) -> Vec<u8> {
    let mut v = format!("{i}:{n}:").into_bytes();
    v.resize(300, b'.');
    v
}

fn open(fs: &FaultyStorage, mode: Durability) -> Store {
    open_reporting(fs, mode).0
}

fn open_reporting(fs: &FaultyStorage, mode: Durability) -> (Store, crate::RecoveryReport) {
    let cfg = DurableConfig {
        mode,
        checkpoint_wal_bytes: u64::MAX,
        checkpoint_interval: Duration::from_secs(86_400),
        delta_checkpoints: false,
        storage: Arc::new(fs.clone()),
        ..DurableConfig::new("/data")
    };
    Store::open(Config::default(), cfg).unwrap()
}

/// Crashes the storage under `store` and opens what survived.
fn crash_and_reopen(fs: &FaultyStorage, store: Arc<Store>, mode: Durability) -> Store {
    fs.crash();
    drop(store);
    fs.restart();
    open(fs, mode)
}

fn dump(store: &Store) -> State {
    let all = store.range(&Range::all()).unwrap();
    all.into_iter()
        .map(|i| (i.key.to_vec(), i.value.to_vec()))
        .collect()
}

fn fill(store: &Store) -> State {
    (0..FILLED)
        .map(|i| {
            store.put(&key(i), &value(i, 0)).unwrap();
            (key(i), value(i, 0))
        })
        .collect()
}

/// Puts, deletes (one in 16) and atomic groups (one in 8: a key and its
/// mirror at the other end of the keyspace, in another chunk) of keys
/// drawn at random until `stop`.
fn writer(store: Arc<Store>, stop: Arc<AtomicBool>) -> Vec<Op> {
    let mut ops = Vec::new();
    let mut x = 7u64;
    while !stop.load(Ordering::Relaxed) {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let i = (x >> 33) as usize % KEYS;
        let v = value(i, ops.len() + 1);
        match x >> 60 {
            0 => {
                store.delete(&key(i)).unwrap();
                ops.push(vec![(i, None)]);
            }
            1 | 2 => {
                let (k, mirror) = (key(i), key(KEYS - 1 - i));
                let put = |key| AtomicWrite::Put {
                    key,
                    value: &v,
                    expiry: Expiry::Never,
                };
                store.write_atomically(&[put(&k), put(&mirror)]).unwrap();
                ops.push(vec![(i, Some(v.clone())), (KEYS - 1 - i, Some(v))]);
            }
            _ => {
                store.put(&key(i), &v).unwrap();
                ops.push(vec![(i, Some(v))]);
            }
        }
    }
    ops
}

fn apply(state: &mut State, op: &Op) {
    for (i, v) in op {
        match v {
            Some(v) => state.insert(key(*i), v.clone()),
            None => state.remove(&key(*i)),
        };
    }
}

/// A checkpoint of `store`, and its file read back: what it wrote, what
/// reading found, and its items' oldest and newest versions.
fn checkpoint_read(fs: &FaultyStorage, store: &Store) -> (CheckpointInfo, Summary, (u64, u64)) {
    let info = store.checkpoint().unwrap();
    let mut span = (u64::MAX, 0);
    let path = Path::new("/data").join(&info.file);
    let read = read(fs, &path, |it| {
        span = (span.0.min(it.version), span.1.max(it.version));
        Ok(())
    })
    .unwrap();
    (info, read, span)
}

/// Full checkpoints while `store` takes writes, until one holds an item
/// newer than its own version (a chunk read at a later version than the
/// first). Returns the writes done, the writer stopped.
fn checkpoint_until_advanced(fs: &FaultyStorage, store: Store) -> (Arc<Store>, Vec<Op>) {
    let store = Arc::new(store);
    let stop = Arc::new(AtomicBool::new(false));
    let w = {
        let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
        std::thread::spawn(move || writer(store, stop))
    };
    let mut advanced = false;
    // Bounded by time, not tries: on a loaded machine the writer may not
    // run for a while.
    let deadline = Instant::now() + RACE_WAIT;
    while Instant::now() < deadline {
        let (info, read, (_, newest)) = checkpoint_read(fs, &store);
        assert_eq!(info.kind, CheckpointKind::Full);
        assert!(read.advancing);
        if newest > read.version {
            advanced = true;
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let ops = w.join().unwrap();
    assert!(advanced, "no checkpoint read a chunk at a later version");
    (store, ops)
}

#[test]
fn with_always_recovery_from_an_advanced_base_and_the_log_loses_no_write() {
    let fs = FaultyStorage::new(1);
    let store = open(&fs, Durability::Always);
    let mut want = fill(&store);
    let (store, ops) = checkpoint_until_advanced(&fs, store);
    ops.iter().for_each(|op| apply(&mut want, op));
    assert_eq!(dump(&store), want);
    let store = crash_and_reopen(&fs, store, Durability::Always);
    assert_eq!(dump(&store), want);
}

/// Under `None` the log is written but not synced, so a crash loses its
/// tail; the base's later chunks hold writes past the first chunk's
/// version, and recovery must not pair them with older items of earlier
/// chunks: the checkpoint syncs the log through its last chunk's version.
#[test]
fn with_an_unsynced_log_recovery_from_an_advanced_base_is_a_prefix_of_the_writes() {
    // More for a soak: `COMBKV_CRASH_SEEDS=200 cargo test --release -p
    // combkv --lib unsynced_log`, as for the crash tests.
    let seeds = std::env::var("COMBKV_CRASH_SEEDS").map_or(4, |s| {
        s.trim().parse().expect("COMBKV_CRASH_SEEDS: a number")
    });
    for seed in 0..seeds {
        let fs = FaultyStorage::new(seed);
        let store = open(&fs, Durability::None);
        let filled = fill(&store);
        let (store, ops) = checkpoint_until_advanced(&fs, store);
        let store = crash_and_reopen(&fs, store, Durability::None);
        let got = dump(&store);
        assert!(
            prefix_reached(&filled, &ops, &got).is_some(),
            "seed {seed}: the recovered state is no prefix of the {} writes",
            ops.len()
        );
    }
}

/// The first `n` such that `filled` with `ops[..n]` applied is `got`.
fn prefix_reached(filled: &State, ops: &[Op], got: &State) -> Option<usize> {
    let mut state = filled.clone();
    let differs = |state: &State, k: &Vec<u8>| state.get(k) != got.get(k);
    let keys: BTreeSet<&Vec<u8>> = filled.keys().chain(got.keys()).collect();
    let mut apart = keys.into_iter().filter(|k| differs(&state, k)).count();
    if apart == 0 {
        return Some(0);
    }
    let count =
        |state: &State, op: &Op| op.iter().filter(|(i, _)| differs(state, &key(*i))).count();
    for (n, op) in ops.iter().enumerate() {
        let before = count(&state, op);
        apply(&mut state, op);
        apart = apart + count(&state, op) - before;
        if apart == 0 {
            return Some(n + 1);
        }
    }
    None
}

/// The clock restarts above every item loaded, not only above the base's
/// own version and the log's records: here the log is gone (as a cut
/// drops records), and the advanced base's later chunks hold items newer
/// than its version.
#[test]
fn the_clock_restarts_above_an_advanced_bases_newest_item() {
    let fs = FaultyStorage::new(5);
    let store = open(&fs, Durability::Always);
    fill(&store);
    let (store, _) = checkpoint_until_advanced(&fs, store);
    let store = Arc::into_inner(store).unwrap();
    store.shutdown().unwrap();
    drop(store);
    let dir = Path::new("/data");
    for name in fs.list(dir).unwrap() {
        if name.starts_with("wal-") {
            fs.remove(&dir.join(name)).unwrap();
        }
    }
    let (store, report) = open_reporting(&fs, Durability::Always);
    let newest = store
        .range(&Range::all())
        .unwrap()
        .iter()
        .map(|i| i.version.get())
        .max()
        .unwrap();
    let base = report.checkpoint.as_ref().unwrap().version;
    assert!(newest > base, "{report}");
    assert!(report.max_version >= newest, "{report}");
    assert!(store.put(b"after", b"x").unwrap().get() > newest);
}

/// A clear while a base is read: its chunks read after the clear (a
/// chunk's pin waits for a clear to finish) hold only what was written
/// after it, the earlier ones items from before it. Recovery drops
/// every item of the file on the clear's record, which is above the base's
/// version, and brings the later ones back from their records, so it comes
/// to the writer's state.
#[test]
fn a_clear_during_a_base_recovers_to_the_writers_state() {
    let fs = FaultyStorage::new(9);
    let store = Arc::new(open(&fs, Durability::Always));
    let mut want = fill(&store);
    let stop = Arc::new(AtomicBool::new(false));
    // Each clear: the writes before it, and read versions around it (its
    // own version is above the first, at most the second).
    let clears = Arc::new(parking_lot::Mutex::new(Vec::<(usize, u64, u64)>::new()));
    let w = {
        let (store, stop, clears) = (Arc::clone(&store), Arc::clone(&stop), Arc::clone(&clears));
        std::thread::spawn(move || {
            let mut ops = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if ops.len() % 2000 == 1999 {
                    let before = store.read_version().get();
                    store.clear().unwrap();
                    let after = store.read_version().get();
                    clears.lock().push((ops.len(), before, after));
                }
                let i = (ops.len() * 7919) % KEYS;
                let v = value(i, ops.len() + 1);
                store.put(&key(i), &v).unwrap();
                ops.push(vec![(i, Some(v))]);
            }
            ops
        })
    };
    // Bases until one began before a clear and ended after it, with items
    // from before it.
    let mut overlapped = false;
    let deadline = Instant::now() + RACE_WAIT;
    while Instant::now() < deadline {
        let (info, _, (oldest, _)) = checkpoint_read(&fs, &store);
        let ended = store.read_version().get();
        overlapped = clears.lock().iter().any(|&(_, before, after)| {
            info.version <= before && oldest <= before && after <= ended
        });
        if overlapped {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let ops = w.join().unwrap();
    assert!(overlapped, "no clear ran during a base");
    let mut at = 0;
    for &(n, _, _) in clears.lock().iter() {
        ops[at..n].iter().for_each(|op| apply(&mut want, op));
        want.clear();
        at = n;
    }
    ops[at..].iter().for_each(|op| apply(&mut want, op));
    assert_eq!(dump(&store), want);
    let store = crash_and_reopen(&fs, store, Durability::Always);
    assert_eq!(dump(&store), want);
}
