//! `Store::backup`: a full checkpoint of one snapshot, written while
//! writers go on, that `Store::open` recovers exactly; refused into a
//! directory that holds anything; never complete-looking after a crash.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use combkv::durable::FaultyStorage;
use combkv::{Config, DurableConfig, Error, Expiry, Flags, Range, Store, Write};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// key -> (value, version, expiry, flags)
type State = BTreeMap<Vec<u8>, (Vec<u8>, u64, Option<u64>, u32)>;

/// One write as the writer saw it acknowledged: its version, its key, and
/// what it left there (None: deleted).
type Logged = (u64, Vec<u8>, Option<(Vec<u8>, Option<u64>, u32)>);

fn dump(store: &Store) -> State {
    store
        .range(&Range::all())
        .unwrap()
        .into_iter()
        .map(|i| {
            let v = (i.value.to_vec(), i.version.get(), i.expires_at_ms, i.flags);
            (i.key.to_vec(), v)
        })
        .collect()
}

/// The model at `version`: every logged write up to it, in version order.
fn model_at(log: &[Logged], version: u64) -> State {
    let mut sorted: Vec<&Logged> = log.iter().filter(|l| l.0 <= version).collect();
    sorted.sort_by_key(|l| l.0);
    let mut state = State::new();
    for (v, key, what) in sorted {
        match what {
            Some((value, expiry, flags)) => {
                state.insert(key.clone(), (value.clone(), *v, *expiry, *flags));
            }
            None => {
                state.remove(key);
            }
        }
    }
    state
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("combkv-backup-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Random puts (with and without expiry and flags) and deletes over 300
/// keys until `stop`; returns what was acknowledged.
fn writer(store: &Store, seed: u64, stop: &AtomicBool) -> Vec<Logged> {
    let mut rng = StdRng::seed_from_u64(seed);
    let expires = combkv::now_ms() + 3_600_000;
    let mut log = Vec::new();
    // At least some writes after the backup, however fast it is.
    let mut after_stop = 200;
    while after_stop > 0 {
        if stop.load(Ordering::Relaxed) {
            after_stop -= 1;
        }
        let key = format!("k{:03}", rng.random_range(0..300)).into_bytes();
        if rng.random_range(0..5) == 0 {
            if let Some(v) = store.delete(&key).unwrap() {
                log.push((v.get(), key, None));
            }
            continue;
        }
        let len = if rng.random_range(0..10) == 0 {
            2000
        } else {
            20
        };
        let value: Vec<u8> = (0..len).map(|_| rng.random_range(b'a'..=b'z')).collect();
        let expiry = rng.random_bool(0.3).then_some(expires);
        let flags = if rng.random_bool(0.3) {
            rng.random()
        } else {
            0
        };
        let put = Write::Put {
            value: value.clone(),
            expiry: expiry.map_or(Expiry::Never, Expiry::AtMs),
            flags: Flags::Set(flags),
        };
        let ((), v) = store.write_with(&key, |_| (put.clone(), ())).unwrap();
        log.push((v.unwrap().get(), key, Some((value, expiry, flags))));
    }
    log
}

/// Two writers run; a backup is taken mid-stream from a third thread;
/// the backup, opened as a data directory, holds exactly the writes up to
/// its version, and new writes there take versions above it.
fn backup_mid_stream(store: Store, name: &str) {
    let store = Arc::new(store);
    let dir = temp_dir(name);
    let stop = AtomicBool::new(false);
    let (logs, info) = std::thread::scope(|s| {
        let writers: Vec<_> = (0..2)
            .map(|w| {
                let (store, stop) = (&store, &stop);
                s.spawn(move || writer(store, 7 + w, stop))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(30));
        let info = s.spawn(|| store.backup(&dir)).join().unwrap();
        stop.store(true, Ordering::Relaxed);
        let logs: Vec<Logged> = writers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect();
        (logs, info.unwrap())
    });
    assert!(info.file.starts_with("ckpt-") && info.file.ends_with(".ckpt"));
    assert!(logs.iter().any(|l| l.0 <= info.version), "writes before it");
    assert!(logs.iter().any(|l| l.0 > info.version), "writes after it");
    let expected = model_at(&logs, info.version);
    assert_eq!(info.items, expected.len() as u64);
    // The directory holds the checkpoint and its lock, nothing else.
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, vec!["LOCK".to_string(), info.file.clone()]);
    assert!(combkv::check(&dir).unwrap().usable_checkpoint().is_some());

    let (restored, report) = Store::open(Config::default(), DurableConfig::new(&dir)).unwrap();
    assert_eq!(dump(&restored), expected, "{report}");
    assert_eq!(report.max_version, info.version, "{report}");
    assert!(restored.put(b"new", b"x").unwrap().get() > info.version);
    // The source store went on: it holds the model at its own end.
    let end = logs.iter().map(|l| l.0).max().unwrap();
    assert_eq!(dump(&store), model_at(&logs, end));
    drop(restored);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn backup_of_an_in_memory_store_mid_stream_holds_its_snapshot() {
    backup_mid_stream(Store::new(Config::default()).unwrap(), "memory");
}

#[test]
fn backup_of_a_durable_store_mid_stream_holds_its_snapshot() {
    let data = temp_dir("durable-data");
    let cfg = DurableConfig {
        mode: combkv::Durability::None,
        checkpoint_wal_bytes: 64 << 10,
        ..DurableConfig::new(&data)
    };
    // Its own checkpoints and merges run meanwhile.
    let (store, _) = Store::open(Config::default(), cfg).unwrap();
    backup_mid_stream(store, "durable");
    std::fs::remove_dir_all(&data).unwrap();
}

#[test]
fn expired_items_and_an_empty_store_back_up_as_such() {
    let store = Store::new(Config::default()).unwrap();
    let empty = temp_dir("empty");
    let info = store.backup(&empty).unwrap();
    assert_eq!(info.items, 0);
    let (s, _) = Store::open(Config::default(), DurableConfig::new(&empty)).unwrap();
    assert!(dump(&s).is_empty());
    drop(s);

    store.put_with(b"gone", b"v", Expiry::AtMs(1)).unwrap();
    store.put(b"kept", b"v").unwrap();
    let dir = temp_dir("expired");
    assert_eq!(store.backup(&dir).unwrap().items, 1);
    let (s, _) = Store::open(Config::default(), DurableConfig::new(&dir)).unwrap();
    assert_eq!(dump(&s).keys().collect::<Vec<_>>(), vec![&b"kept".to_vec()]);
    drop(s);
    for d in [empty, dir] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

#[test]
fn a_directory_that_holds_anything_is_refused_and_left_alone() {
    let store = Store::new(Config::default()).unwrap();
    store.put(b"a", b"1").unwrap();
    let dir = temp_dir("busy");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let err = store.backup(&dir).unwrap_err();
    match &err {
        Error::Io(e) => assert_eq!(e.kind(), std::io::ErrorKind::DirectoryNotEmpty, "{e}"),
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("not empty"), "{err}");
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(names.len(), 1);
    // A lock file alone (a failed backup leaves one) is no obstacle; a
    // second backup into the same place is refused.
    std::fs::remove_dir(dir.join("sub")).unwrap();
    std::fs::write(dir.join("LOCK"), b"").unwrap();
    store.backup(&dir).unwrap();
    assert!(store.backup(&dir).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- faults ----------------------------------------------------------------

const DATA: &str = "/data";
const BACKUP: &str = "/backup";

fn open_faulty(fs: &FaultyStorage, dir: &str) -> (Store, State) {
    let cfg = DurableConfig {
        storage: Arc::new(fs.clone()),
        ..DurableConfig::new(dir)
    };
    let (store, _) = Store::open(Config::with_node_size(1024), cfg).unwrap();
    let state = dump(&store);
    (store, state)
}

fn checkpoint_files(fs: &FaultyStorage, dir: &str) -> Vec<String> {
    use combkv::durable::Storage;
    fs.list(Path::new(dir))
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with("ckpt-") && n.ends_with(".ckpt"))
        .collect()
}

fn filled(fs: &FaultyStorage) -> (Store, State) {
    let (store, _) = open_faulty(fs, DATA);
    for i in 0..300u32 {
        let v = format!("value-{i}").repeat(1 + (i % 7) as usize);
        store
            .put(format!("key{i:04}").as_bytes(), v.as_bytes())
            .unwrap();
    }
    let state = dump(&store);
    (store, state)
}

/// A crash at each sync point of a backup: afterwards the backup holds a
/// checkpoint only if it is whole (it then opens to the snapshot), and the
/// store's own directory recovers everything.
#[test]
fn a_crash_at_any_point_of_a_backup_leaves_no_complete_looking_backup() {
    let mut k = 1;
    loop {
        let fs = FaultyStorage::new(k);
        let (store, state) = filled(&fs);
        fs.crash_at_sync(k);
        let outcome = store.backup(Path::new(BACKUP));
        let crashed = fs.has_crashed();
        drop(store);
        if !crashed {
            outcome.unwrap();
            assert!(k > 1, "a backup passes sync points");
            // A crash right after it keeps the whole backup.
            fs.crash();
            fs.restart();
            let (b, got) = open_faulty(&fs, BACKUP);
            assert_eq!(got, state);
            drop(b);
            return;
        }
        assert!(outcome.is_err(), "crash at sync {k}");
        fs.restart();
        if checkpoint_files(&fs, BACKUP).is_empty() {
            // Incomplete, and seen as such.
            let (b, got) = open_faulty(&fs, BACKUP);
            assert!(got.is_empty(), "crash at sync {k}");
            drop(b);
        } else {
            let (b, got) = open_faulty(&fs, BACKUP);
            assert_eq!(got, state, "crash at sync {k}");
            drop(b);
        }
        let (s, got) = open_faulty(&fs, DATA);
        assert_eq!(got, state, "crash at sync {k}");
        drop(s);
        k += 1;
    }
}

/// A write that fails mid-backup fails the backup alone: its unfinished
/// file is removed, the store keeps taking writes, and the same directory
/// takes the next backup.
#[test]
fn a_failed_backup_changes_nothing_and_can_be_retried() {
    let fs = FaultyStorage::new(3);
    let (store, mut state) = filled(&fs);
    fs.fail_write_at(1);
    store.backup(Path::new(BACKUP)).unwrap_err();
    assert!(checkpoint_files(&fs, BACKUP).is_empty());
    {
        use combkv::durable::Storage;
        assert_eq!(fs.list(Path::new(BACKUP)).unwrap(), Vec::<String>::new());
    }
    let v = store.put(b"after", b"x").unwrap();
    state.insert(b"after".to_vec(), (b"x".to_vec(), v.get(), None, 0));
    let info = store.backup(Path::new(BACKUP)).unwrap();
    assert_eq!(info.version, v.get());
    drop(store);
    let (b, got) = open_faulty(&fs, BACKUP);
    assert_eq!(got, state);
    drop(b);
}

/// `read_backup` hands over exactly what the backup holds, expired items
/// included, and refuses what is no complete backup.
#[test]
fn read_backup_visits_the_backup_and_refuses_anything_else() {
    let store = Store::new(Config::default()).unwrap();
    store.put(b"a", b"1").unwrap();
    store
        .put_with(b"b", b"2", Expiry::AtMs(combkv::now_ms() + 60_000))
        .unwrap();
    let dir = temp_dir("read");
    let info = store.backup(&dir).unwrap();
    let mut seen = State::new();
    let (file, version, items) = combkv::read_backup(&dir, |it| {
        let v = (
            it.value.to_vec(),
            it.version.get(),
            it.expires_at_ms,
            it.flags,
        );
        seen.insert(it.key.to_vec(), v);
    })
    .unwrap();
    assert_eq!((file, version, items), (info.file.clone(), info.version, 2));
    assert_eq!(seen, dump(&store));
    // A backup is read at one version.
    assert!(!combkv::check(&dir).unwrap().checkpoints[0].advancing);

    // Once a server ran on it, it holds a log: no longer a backup.
    let cfg = DurableConfig {
        delta_checkpoints: false,
        ..DurableConfig::new(&dir)
    };
    let (s, _) = Store::open(Config::default(), cfg).unwrap();
    s.put(b"c", b"3").unwrap();
    let own = s.checkpoint().unwrap();
    assert_eq!(own.kind, combkv::CheckpointKind::Full);
    drop(s);
    let err = combkv::read_backup(&dir, |_| {}).unwrap_err();
    assert!(matches!(err, Error::Corrupt(_)), "{err}");
    assert!(err.to_string().contains("not a backup"), "{err}");
    // Nor is the server's own checkpoint alone: it was read at advancing
    // versions, which only its log completes.
    for e in std::fs::read_dir(&dir).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if name != own.file && name != "LOCK" {
            std::fs::remove_file(dir.join(name)).unwrap();
        }
    }
    let report = combkv::check(&dir).unwrap();
    assert!(report.checkpoints[0].advancing, "{report}");
    let err = combkv::read_backup(&dir, |_| {}).unwrap_err();
    assert!(err.to_string().contains("needs the log beside it"), "{err}");
    // An unfinished one names why.
    let partial = temp_dir("partial");
    std::fs::create_dir_all(&partial).unwrap();
    std::fs::write(partial.join(format!("{}.tmp", info.file)), b"half").unwrap();
    let err = combkv::read_backup(&partial, |_| {}).unwrap_err();
    assert!(err.to_string().contains("did not complete"), "{err}");
    for d in [dir, partial] {
        std::fs::remove_dir_all(d).unwrap();
    }
}
