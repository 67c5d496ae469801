//! Incremental checkpoints: delta runs hold what changed and no more,
//! recovery loads a base with its runs exactly, a clear (live or replayed)
//! is carried, background merges replace the chain and remove what it
//! outgrew, a damaged run ends the chain where the log takes over, and a
//! merge that cannot read a run makes the next checkpoint a full one.
//! (Crashes at every sync point with runs and merges in flight:
//! `durable.rs`.)

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use combkv::durable::check::check_with;
use combkv::durable::{FaultyStorage, Storage};
use combkv::{CheckpointKind, Config, DurableConfig, Expiry, Range, RecoveryReport, Store};

const DIR: &str = "/data";

type State = BTreeMap<Vec<u8>, (Vec<u8>, u64, Option<u64>)>;

fn config(fs: &FaultyStorage, merge_after: usize) -> DurableConfig {
    DurableConfig {
        checkpoint_wal_bytes: u64::MAX,
        checkpoint_interval: Duration::from_secs(86_400),
        merge_after_deltas: merge_after,
        storage: Arc::new(fs.clone()),
        ..DurableConfig::new(DIR)
    }
}

fn open(fs: &FaultyStorage, merge_after: usize) -> (Store, RecoveryReport) {
    Store::open(Config::with_node_size(1024), config(fs, merge_after)).unwrap()
}

fn dump(store: &Store) -> State {
    store
        .range(&Range::all())
        .unwrap()
        .into_iter()
        .map(|i| {
            (
                i.key.to_vec(),
                (i.value.to_vec(), i.version.get(), i.expires_at_ms),
            )
        })
        .collect()
}

/// Waits (up to 10 s) until the persistence figures satisfy `done`.
fn wait_until(store: &Store, done: impl Fn(&combkv::PersistenceStats) -> bool) {
    for _ in 0..1000 {
        if done(&store.persistence()) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("still waiting: {:?}", store.persistence());
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn files(fs: &FaultyStorage, prefix: &str) -> Vec<String> {
    let mut names = fs.list(Path::new(DIR)).unwrap();
    names.retain(|n| n.starts_with(prefix) && !n.ends_with(".tmp"));
    names
}

/// Rewrites every `step`-th key of `0..n` (and deletes every 7th of those),
/// enough writes to the same leaves that many are log merged or split.
fn churn(store: &Store, n: u64, step: u64, round: u64) {
    for i in (0..n).step_by(step as usize) {
        if i % 7 == 0 {
            store.delete(&key(i)).unwrap();
        } else {
            store
                .put(&key(i), format!("round {round} {i}").as_bytes())
                .unwrap();
        }
    }
}

#[test]
fn a_delta_run_holds_the_changed_keys_and_recovers_exactly() {
    let fs = FaultyStorage::new(1);
    let (store, _) = open(&fs, 100);
    for i in 0..5000 {
        store.put(&key(i), b"initial value").unwrap();
    }
    let base = store.checkpoint().unwrap();
    assert_eq!(base.kind, CheckpointKind::Full);
    // 1% of the keys, a third of them twice, some deleted; and a TTL.
    churn(&store, 5000, 100, 1);
    churn(&store, 5000, 300, 2);
    let soon = combkv::now_ms() + 3_600_000;
    store.put_with(b"ttl", b"x", Expiry::AtMs(soon)).unwrap();
    let d = store.checkpoint().unwrap();
    assert_eq!(d.kind, CheckpointKind::Delta { from: base.version });
    // One entry per changed key (50 keys and the TTL), no whole leaves.
    assert_eq!(d.items, 51, "{d:?}");
    assert!(d.bytes * 20 < base.bytes, "{} vs {}", d.bytes, base.bytes);
    let again = store.checkpoint().unwrap();
    assert_eq!(again.kind, CheckpointKind::Unchanged);
    assert_eq!(again.file, d.file);
    let want = dump(&store);
    store.shutdown().unwrap();
    drop(store);

    let report = check_with(&fs, Path::new(DIR)).unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.usable_deltas().len(), 1, "{report}");
    assert!(report.to_string().contains("with 1 delta runs"), "{report}");

    let (store, report) = open(&fs, 100);
    let c = report.checkpoint.as_ref().unwrap();
    assert_eq!((c.version, c.deltas.len()), (d.version, 1), "{report}");
    assert_eq!(report.records_replayed, 0, "{report}");
    assert_eq!(dump(&store), want, "versions, values and TTLs come back");
    assert_eq!(store.len(), want.len() as u64);
}

#[test]
fn a_live_clear_is_carried_by_the_next_run() {
    let fs = FaultyStorage::new(2);
    let (store, _) = open(&fs, 100);
    for i in 0..2000 {
        store.put(&key(i), b"before the clear").unwrap();
    }
    store.checkpoint().unwrap();
    store.clear().unwrap();
    for i in (0..2000).step_by(10) {
        store.put(&key(i), b"after the clear").unwrap();
    }
    let d = store.checkpoint().unwrap();
    assert!(matches!(d.kind, CheckpointKind::Delta { .. }), "{d:?}");
    let want = dump(&store);
    assert_eq!(want.len(), 200);
    drop(store);
    let (store, report) = open(&fs, 100);
    assert_eq!(report.checkpoint.unwrap().deltas.len(), 1);
    assert_eq!(dump(&store), want);
}

#[test]
fn a_clear_replayed_from_the_log_makes_the_next_checkpoint_full() {
    let fs = FaultyStorage::new(3);
    let (store, _) = open(&fs, 100);
    for i in 0..1000 {
        store.put(&key(i), b"v").unwrap();
    }
    store.checkpoint().unwrap();
    store.clear().unwrap();
    store.put(b"survivor", b"s").unwrap();
    store.shutdown().unwrap();
    drop(store);
    // The clear comes back from the log: the new tree's leaves no longer
    // tell what changed since the base.
    let (store, report) = open(&fs, 100);
    assert_eq!(report.records_replayed, 2, "{report}");
    assert_eq!(store.checkpoint().unwrap().kind, CheckpointKind::Full);
    store.put(b"later", b"l").unwrap();
    assert!(matches!(
        store.checkpoint().unwrap().kind,
        CheckpointKind::Delta { .. }
    ));
    let want = dump(&store);
    assert_eq!(want.len(), 2);
    drop(store);
    let (store, _) = open(&fs, 100);
    assert_eq!(dump(&store), want);
}

#[test]
fn a_background_merge_replaces_the_chain_and_old_files_go() {
    let fs = FaultyStorage::new(4);
    let (store, _) = open(&fs, 2);
    for i in 0..3000 {
        store.put(&key(i), b"initial").unwrap();
    }
    store.checkpoint().unwrap();
    for round in 1..=6 {
        churn(&store, 3000, 50, round);
        store.checkpoint().unwrap();
    }
    // Merges run after every second run; wait for the last one queued.
    wait_until(&store, |p| p.delta_runs < 2 && p.merges_ok >= 3);
    let p = store.persistence();
    assert_eq!(p.merges_failed, 0);
    let merged = p.last_merge.clone().unwrap();
    assert_eq!(merged.kind, CheckpointKind::Merged { runs: 2 });
    assert_eq!(merged.items, 3000 - 3000 / 350 - 1, "{merged:?}");
    // Two bases stay (the newest and one to fall back to), and only the
    // runs that lead from the older one.
    assert!(files(&fs, "ckpt-").len() <= 2, "{:?}", files(&fs, "ckpt-"));
    assert!(
        files(&fs, "delta-").len() <= 2,
        "{:?}",
        files(&fs, "delta-")
    );
    let want = dump(&store);
    store.shutdown().unwrap();
    drop(store);
    let (store, report) = open(&fs, 2);
    assert!(report.skipped_checkpoints.is_empty(), "{report}");
    assert_eq!(dump(&store), want);
}

#[test]
fn a_damaged_run_ends_the_chain_and_the_log_covers_the_rest() {
    let fs = FaultyStorage::new(5);
    let (store, _) = open(&fs, 100);
    for i in 0..2000 {
        store.put(&key(i), b"initial").unwrap();
    }
    store.checkpoint().unwrap();
    churn(&store, 2000, 20, 1);
    store.checkpoint().unwrap();
    churn(&store, 2000, 30, 2);
    let newest = store.checkpoint().unwrap();
    store.put(b"tail", b"t").unwrap();
    let want = dump(&store);
    store.shutdown().unwrap();
    drop(store);
    let path = Path::new(DIR).join(&newest.file);
    let mut bytes = fs.file(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    fs.put_file(&path, bytes);

    let report = check_with(&fs, Path::new(DIR)).unwrap();
    assert!(!report.is_clean());
    assert_eq!(report.usable_deltas().len(), 1, "{report}");
    let (store, report) = open(&fs, 100);
    let c = report.checkpoint.as_ref().unwrap();
    assert_eq!(c.deltas.len(), 1, "{report}");
    assert_eq!(report.skipped_checkpoints.len(), 1, "{report}");
    assert!(report.records_replayed > 60, "{report}");
    assert_eq!(dump(&store), want, "nothing lost");
    // The next run starts at the chain's end, beside the damaged one, and
    // recovery takes it.
    store.put(b"more", b"m").unwrap();
    let d = store.checkpoint().unwrap();
    assert_eq!(d.kind, CheckpointKind::Delta { from: c.version });
    let want = dump(&store);
    drop(store);
    let (store, report) = open(&fs, 100);
    assert_eq!(report.checkpoint.unwrap().deltas.len(), 2);
    assert_eq!(dump(&store), want);
}

#[test]
fn a_merge_that_cannot_read_a_run_makes_the_next_checkpoint_full() {
    let fs = FaultyStorage::new(6);
    let (store, _) = open(&fs, 2);
    for i in 0..1000 {
        store.put(&key(i), b"initial").unwrap();
    }
    store.checkpoint().unwrap();
    churn(&store, 1000, 10, 1);
    let first = store.checkpoint().unwrap();
    // Damage the first run before the second checkpoint queues the merge.
    let path = Path::new(DIR).join(&first.file);
    let mut bytes = fs.file(&path).unwrap();
    let at = bytes.len() - 30;
    bytes[at] ^= 1;
    fs.put_file(&path, bytes);
    churn(&store, 1000, 15, 2);
    store.checkpoint().unwrap();
    wait_until(&store, |p| p.merges_failed > 0);
    store.put(b"x", b"y").unwrap();
    assert_eq!(store.checkpoint().unwrap().kind, CheckpointKind::Full);
    let want = dump(&store);
    drop(store);
    let (store, report) = open(&fs, 2);
    assert_eq!(report.checkpoint.unwrap().deltas.len(), 0);
    assert_eq!(dump(&store), want);
}

/// A base merged from three runs, two runs on it, and a log tail: returns
/// the store's dump and the names of the merged base and of the first run
/// on it. `merge_after` 3: the merge comes after the third run.
fn chain_on_a_merged_base(fs: &FaultyStorage) -> (State, String, String) {
    let (store, _) = open(fs, 3);
    for i in 0..2000 {
        store.put(&key(i), b"initial").unwrap();
    }
    store.checkpoint().unwrap();
    for round in 1..=3 {
        churn(&store, 2000, 40, round);
        store.checkpoint().unwrap();
    }
    wait_until(&store, |p| p.merges_ok > 0);
    let merged = store.persistence().last_merge.unwrap().file;
    churn(&store, 2000, 30, 4);
    let first_on_it = store.checkpoint().unwrap().file;
    churn(&store, 2000, 45, 5);
    store.checkpoint().unwrap();
    store.put(b"tail", b"t").unwrap();
    let want = dump(&store);
    store.shutdown().unwrap();
    (want, merged, first_on_it)
}

fn damage(fs: &FaultyStorage, name: &str) {
    let path = Path::new(DIR).join(name);
    let mut bytes = fs.file(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x10;
    fs.put_file(&path, bytes);
}

/// The log reaches back to where the older base's chain ends, so a damaged
/// run that is not the last, or a damaged newest base, loses nothing.
#[test]
fn a_damaged_earlier_run_or_newest_base_loses_nothing() {
    // A run in the middle: the chain ends at the merged base, and the log
    // goes back that far.
    let fs = FaultyStorage::new(7);
    let (want, _, first_on_it) = chain_on_a_merged_base(&fs);
    damage(&fs, &first_on_it);
    let (store, report) = open(&fs, 100);
    assert_eq!(
        report.checkpoint.as_ref().unwrap().deltas.len(),
        0,
        "{report}"
    );
    assert_eq!(dump(&store), want, "{report}");
    drop(store);

    // The merged base: the older base and its runs reach its version, and
    // the runs on the merged base follow.
    let fs = FaultyStorage::new(8);
    let (want, merged, _) = chain_on_a_merged_base(&fs);
    damage(&fs, &merged);
    let (store, report) = open(&fs, 100);
    let c = report.checkpoint.as_ref().unwrap();
    assert_eq!(c.deltas.len(), 5, "{report}");
    assert_eq!(dump(&store), want, "{report}");
}
