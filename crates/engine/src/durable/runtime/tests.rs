use super::*;
use crate::durable::FaultyStorage;
use crate::durable::executor::Backend;
use crate::{Config, Range, Store};

fn store(fs: &FaultyStorage, merge_after: usize) -> Store {
    let cfg = DurableConfig {
        checkpoint_wal_bytes: u64::MAX,
        checkpoint_interval: std::time::Duration::from_secs(86_400),
        merge_after_deltas: merge_after,
        storage: Arc::new(fs.clone()),
        ..DurableConfig::new("/data")
    };
    Store::open(Config::with_node_size(1024), cfg).unwrap().0
}

fn state(store: &Store) -> Arc<Checkpoints> {
    Arc::clone(&store.durable_for_tests().unwrap().checkpoints)
}

fn write(store: &Store, round: u64) {
    for i in (round..1000).step_by(40) {
        store
            .put(
                format!("key{i:04}").as_bytes(),
                format!("{round}").as_bytes(),
            )
            .unwrap();
    }
}

fn dump(store: &Store) -> Vec<(bytes::Bytes, bytes::Bytes, u64)> {
    let all = store.range(&Range::all()).unwrap();
    all.into_iter()
        .map(|i| (i.key, i.value, i.version.get()))
        .collect()
}

/// `run` is a checkpoint's body without the merge its task queues
/// after it: runs pile up until back-pressure merges them first.
#[test]
fn a_checkpoint_merges_first_once_runs_pile_up() {
    let fs = FaultyStorage::new(1);
    let store = store(&fs, 2);
    let s = state(&store);
    write(&store, 0);
    assert_eq!(s.run().unwrap().kind, CheckpointKind::Full);
    for round in 1..=4 {
        write(&store, round);
        assert!(matches!(
            s.run().unwrap().kind,
            CheckpointKind::Delta { .. }
        ));
    }
    assert_eq!(s.chain.lock().deltas.len(), 4);
    write(&store, 5);
    let info = s.run().unwrap();
    assert_eq!(s.merges_ok.load(Ordering::Relaxed), 1);
    let merged = s.last_merge.lock().clone().unwrap();
    assert_eq!(merged.kind, CheckpointKind::Merged { runs: 4 });
    assert_eq!(
        info.kind,
        CheckpointKind::Delta {
            from: merged.version
        }
    );
    assert_eq!(s.chain.lock().deltas.len(), 1);
    let want = dump(&store);
    drop(s);
    drop(store);
    let store = super::tests::store(&fs, 2);
    assert_eq!(dump(&store), want);
}

/// A second open of a directory a store has open is refused at once,
/// and so is a repair, naming this process; they go through once the
/// first store is dropped. On the real file system (a `flock`) and in
/// the fault model, where a crash, which ends the holder, frees it.
#[test]
fn a_second_open_and_a_repair_are_refused_while_a_store_has_the_directory() {
    let tmp = std::env::temp_dir().join(format!("combkv-lock-open-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let faulty = FaultyStorage::new(3);
    let storages: [(Arc<dyn crate::durable::Storage>, std::path::PathBuf); 2] = [
        (Arc::new(crate::durable::FsStorage), tmp.clone()),
        (Arc::new(faulty.clone()), "/data".into()),
    ];
    for (storage, dir) in storages {
        let cfg = DurableConfig {
            storage: Arc::clone(&storage),
            ..DurableConfig::new(&dir)
        };
        let (first, _) = Store::open(Config::with_node_size(1024), cfg.clone()).unwrap();
        first.put(b"k", b"1").unwrap();
        let in_use = crate::durable::DirInUse {
            dir: dir.clone(),
            pid: Some(std::process::id()),
        };
        let second = Store::open(Config::with_node_size(1024), cfg.clone()).unwrap_err();
        assert_eq!(second, crate::Error::InUse(in_use.clone()));
        let repair = crate::durable::repair_with(&*storage, &dir).unwrap_err();
        assert_eq!(repair, RecoveryError::InUse(in_use));
        // The first store is untouched and goes on.
        first.put(b"k", b"2").unwrap();
        drop(first);
        let (again, _) = Store::open(Config::with_node_size(1024), cfg).unwrap();
        assert_eq!(again.get(b"k").unwrap().unwrap(), &b"2"[..]);
        drop(again);
    }
    std::fs::remove_dir_all(&tmp).unwrap();

    let cfg = DurableConfig {
        storage: Arc::new(faulty.clone()),
        ..DurableConfig::new("/data")
    };
    let (held, _) = Store::open(Config::with_node_size(1024), cfg.clone()).unwrap();
    faulty.crash();
    faulty.restart();
    let (after_crash, _) = Store::open(Config::with_node_size(1024), cfg).unwrap();
    assert_eq!(after_crash.get(b"k").unwrap().unwrap(), &b"2"[..]);
    drop(held);
    drop(after_crash);
}

/// An offload backend that cannot run anything.
#[derive(Debug)]
struct Refusing;
impl Backend for Refusing {
    fn name(&self) -> &str {
        "refusing-offload"
    }
    fn run(&self, _task: &mut dyn Task) -> Result<(), TaskError> {
        Err(TaskError::Offload {
            backend: self.name().into(),
            source: IoError::new("merging", std::io::Error::other("device lost")),
        })
    }
}

#[test]
fn a_merge_failing_on_an_offload_backend_is_retried_on_the_cpu() {
    let fs = FaultyStorage::new(2);
    let store = store(&fs, 100);
    let s = state(&store);
    write(&store, 0);
    s.run().unwrap();
    for round in 1..=2 {
        write(&store, round);
        s.run().unwrap();
    }
    let ex = Executor::new(1, 4, vec![Arc::new(Refusing)]);
    s.merge_queued.store(true, Ordering::Release);
    let task = MergeTask {
        state: Arc::clone(&s),
    };
    assert!(ex.submit(Box::new(task)).is_ok());
    ex.stop();
    let st = ex.stats();
    assert_eq!((st.completed, st.failed, st.retried_on_cpu), (1, 0, 1));
    assert!(st.last_failure.unwrap().contains("device lost"));
    assert_eq!(s.merges_ok.load(Ordering::Relaxed), 1);
    assert!(!s.merge_queued.load(Ordering::Acquire));
    assert!(s.chain.lock().deltas.is_empty());
    let want = dump(&store);
    drop(s);
    drop(store);
    let store = super::tests::store(&fs, 100);
    assert_eq!(dump(&store), want);
}

/// Every fsync, checkpoint and merge counted is timed: each histogram's
/// count is its counter, and the checkpoints' durations are their
/// histogram's sum.
#[test]
fn fsyncs_checkpoints_and_merges_are_timed_as_they_are_counted() {
    let fs = FaultyStorage::new(3);
    let store = store(&fs, 2);
    let before = store.persistence();
    assert_eq!(before.checkpoint_durations.count(), 0);
    assert_eq!(before.merge_durations.count(), 0);
    write(&store, 0);
    let mut took = store.checkpoint().unwrap().duration;
    for round in 1..=2 {
        write(&store, round);
        took += store.checkpoint().unwrap().duration;
    }
    // Each run rewrites every key, half the base's bytes or more: each
    // queues a merge unless one is queued. Once none is, and one ran,
    // every merge is over (only a checkpoint queues one).
    let s = state(&store);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while s.merge_queued.load(Ordering::Acquire) || store.persistence().merges_ok == 0 {
        assert!(std::time::Instant::now() < deadline, "no merge ran");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let p = store.persistence();
    // `Always`: every put waited for an fsync of its own.
    assert!(p.fsyncs >= 3 * 25, "{} fsyncs", p.fsyncs);
    assert_eq!(p.fsync_durations.count(), p.fsyncs);
    assert_eq!(p.checkpoints_ok, 3);
    assert_eq!(p.checkpoint_durations.count(), 3);
    assert_eq!(p.checkpoint_durations.sum(), took);
    assert_eq!(p.merge_durations.count(), p.merges_ok);
    assert!(p.merge_durations.sum() >= p.last_merge.as_ref().unwrap().duration);
}
