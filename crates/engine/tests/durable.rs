//! Durability: crash consistency through the fault-injecting storage,
//! poisoning, torn and corrupt tails, checkpoint fallback, and one test per
//! behaviour of the log, checkpoints and recovery.

mod wal_files;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use combkv::durable::FaultyStorage;
use combkv::{Config, Durability, DurableConfig, Error, Expiry, Range, RecoveryReport, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const DIR: &str = "/data";

/// key -> (value, version, expiry)
type State = BTreeMap<Vec<u8>, (Vec<u8>, u64, Option<u64>)>;

fn config(storage: &FaultyStorage) -> DurableConfig {
    DurableConfig {
        wal_segment_bytes: 600,
        checkpoint_wal_bytes: u64::MAX,
        checkpoint_interval: Duration::from_secs(86_400),
        storage: Arc::new(storage.clone()),
        ..DurableConfig::new(DIR)
    }
}

fn open(storage: &FaultyStorage) -> Result<(Store, RecoveryReport), Error> {
    Store::open(Config::with_node_size(1024), config(storage))
}

/// How the crash test checkpoints: every checkpoint full, or delta runs
/// with a background merge after every second run (so that merges are in
/// flight at many of the crash points).
#[derive(Debug, Clone, Copy)]
enum Checkpointing {
    Full,
    Deltas,
}

fn open_as(storage: &FaultyStorage, how: Checkpointing) -> Result<(Store, RecoveryReport), Error> {
    let cfg = match how {
        Checkpointing::Full => DurableConfig {
            delta_checkpoints: false,
            ..config(storage)
        },
        Checkpointing::Deltas => DurableConfig {
            merge_after_deltas: 2,
            ..config(storage)
        },
    };
    Store::open(Config::with_node_size(1024), cfg)
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

fn far_future() -> u64 {
    combkv::now_ms() + 3_600_000
}

// ---- crash at every sync point -------------------------------------------

/// A key's value and expiry, or None for absent.
type Value = Option<(Vec<u8>, Option<u64>)>;

/// What an unacknowledged write may have done: set a key's value (None:
/// deleted), or clear.
#[derive(Debug, Clone)]
enum Effect {
    Set(Vec<u8>, Value),
    Clear,
}

/// Runs a seeded workload until it ends or the store fails; returns the
/// acknowledged state and the writes in flight when it failed.
fn workload(store: &Store, seed: u64, ops: usize) -> (State, Vec<Effect>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = State::new();
    let expiry = far_future();
    let key = |rng: &mut StdRng| format!("k{:02}", rng.random_range(0..40)).into_bytes();
    let value = |rng: &mut StdRng| {
        let n = if rng.random_bool(0.1) {
            60
        } else {
            rng.random_range(0..12)
        };
        (0..n)
            .map(|_| rng.random_range(b'a'..=b'z'))
            .collect::<Vec<u8>>()
    };
    for _ in 0..ops {
        let op = rng.random_range(0..100);
        if op < 8 {
            // A session of a few writes, acknowledged together.
            let s = store.session();
            let mut effects = Vec::new();
            let mut versions = Vec::new();
            let mut failed = false;
            for _ in 0..rng.random_range(1..6) {
                let k = key(&mut rng);
                if rng.random_bool(0.7) {
                    let v = value(&mut rng);
                    match s.put(&k, &v) {
                        Ok(ver) => versions.push(Some(ver.get())),
                        Err(_) => failed = true,
                    }
                    effects.push(Effect::Set(k, Some((v, None))));
                } else {
                    match s.delete(&k) {
                        Ok(_) => versions.push(None),
                        Err(_) => failed = true,
                    }
                    effects.push(Effect::Set(k, None));
                }
                if failed {
                    break;
                }
            }
            if failed || s.commit().is_err() {
                return (model, effects);
            }
            for (e, ver) in effects.into_iter().zip(versions) {
                if let Effect::Set(k, Some((v, x))) = e {
                    model.insert(k, (v, ver.expect("a put has a version"), x));
                } else if let Effect::Set(k, None) = e {
                    model.remove(&k);
                }
            }
        } else if op < 40 {
            let (k, v) = (key(&mut rng), value(&mut rng));
            let x = rng.random_bool(0.3).then_some(expiry);
            let e = x.map_or(Expiry::Never, Expiry::AtMs);
            match store.put_with(&k, &v, e) {
                Ok(ver) => {
                    model.insert(k, (v, ver.get(), x));
                }
                Err(_) => return (model, vec![Effect::Set(k, Some((v, x)))]),
            }
        } else if op < 55 {
            let k = key(&mut rng);
            match store.delete(&k) {
                Ok(_) => {
                    model.remove(&k);
                }
                Err(_) => return (model, vec![Effect::Set(k, None)]),
            }
        } else if op < 65 {
            // CAS with the right version half the time.
            let k = key(&mut rng);
            let v = value(&mut rng);
            let cur = model.get(&k).map_or(0, |c| c.1);
            let expected = if rng.random_bool(0.5) { cur } else { cur + 1 };
            match store.cas(&k, expected, &v, Expiry::Keep) {
                Ok(Some(ver)) => {
                    let x = model.get(&k).and_then(|c| c.2);
                    model.insert(k, (v, ver.get(), x));
                }
                Ok(None) => assert_ne!(expected, cur, "a matching CAS must succeed"),
                Err(_) => {
                    let x = model.get(&k).and_then(|c| c.2);
                    let effect = (expected == cur).then_some(Effect::Set(k, Some((v, x))));
                    return (model, effect.into_iter().collect());
                }
            }
        } else if op < 72 {
            let k = key(&mut rng);
            let v = value(&mut rng);
            match store.insert(&k, &v) {
                Ok(Some(ver)) => {
                    assert!(!model.contains_key(&k));
                    model.insert(k, (v, ver.get(), None));
                }
                Ok(None) => assert!(model.contains_key(&k)),
                Err(_) => {
                    let effect =
                        (!model.contains_key(&k)).then_some(Effect::Set(k, Some((v, None))));
                    return (model, effect.into_iter().collect());
                }
            }
        } else if op < 80 {
            let k = format!("n{:02}", rng.random_range(0..5)).into_bytes();
            let old: i64 = model
                .get(&k)
                .map_or(0, |c| std::str::from_utf8(&c.0).unwrap().parse().unwrap());
            let delta = rng.random_range(-50..50);
            match store.incr_by(&k, delta) {
                Ok(n) => {
                    assert_eq!(n, old + delta);
                    let item = store.get_item(&k).unwrap().expect("just written");
                    assert_eq!(item.value, n.to_string().as_bytes());
                    let x = model.get(&k).and_then(|c| c.2);
                    model.insert(k, (item.value.to_vec(), item.version.get(), x));
                }
                Err(_) => {
                    let x = model.get(&k).and_then(|c| c.2);
                    let v = (old + delta).to_string().into_bytes();
                    return (model, vec![Effect::Set(k, Some((v, x)))]);
                }
            }
        } else if op < 88 {
            let k = key(&mut rng);
            match model.get(&k).cloned() {
                Some((v, _, _)) => match store.expire(&k, Expiry::AtMs(expiry)) {
                    Ok(Some(ver)) => {
                        model.insert(k, (v, ver.get(), Some(expiry)));
                    }
                    Ok(None) => panic!("expire of a present key"),
                    Err(_) => return (model, vec![Effect::Set(k, Some((v, Some(expiry))))]),
                },
                None => match store.expire(&k, Expiry::Never) {
                    Ok(r) => assert_eq!(r, None),
                    Err(_) => return (model, Vec::new()),
                },
            }
        } else if op < 90 {
            match store.clear() {
                Ok(()) => model.clear(),
                Err(_) => return (model, vec![Effect::Clear]),
            }
        } else if op < 95 {
            // A checkpoint failing (a crash inside it) loses nothing.
            let _ = store.checkpoint();
        } else {
            let k = key(&mut rng);
            assert_eq!(
                store.get(&k).unwrap().map(|b| b.to_vec()),
                model.get(&k).map(|c| c.0.clone()),
                "reads see exactly the acknowledged writes"
            );
        }
    }
    (model, Vec::new())
}

/// The recovered state equals the acknowledged one plus a prefix of the
/// writes in flight (whose versions are unknown, so only their values and
/// expiries are compared, and their versions must be newer).
fn assert_recovered(got: &State, acked: &State, in_flight: &[Effect], ctx: &str) {
    let newest_acked = acked.values().map(|c| c.1).max().unwrap_or(0);
    'prefix: for n in 0..=in_flight.len() {
        let mut want: BTreeMap<Vec<u8>, Value> = acked
            .iter()
            .map(|(k, c)| (k.clone(), Some((c.0.clone(), c.2))))
            .collect();
        let mut touched = std::collections::BTreeSet::new();
        for e in &in_flight[..n] {
            match e {
                Effect::Set(k, v) => {
                    want.insert(k.clone(), v.clone());
                    touched.insert(k.clone());
                }
                Effect::Clear => {
                    for v in want.values_mut() {
                        *v = None;
                    }
                }
            }
        }
        want.retain(|_, v| v.is_some());
        if want.len() != got.len() {
            continue;
        }
        for (k, (v, ver, x)) in got {
            match want.get(k) {
                Some(Some((wv, wx))) if wv == v && wx == x => {}
                _ => continue 'prefix,
            }
            let exact =
                !touched.contains(k) && !matches!(in_flight[..n].last(), Some(Effect::Clear));
            if exact && acked.get(k).map(|c| c.1) != Some(*ver) {
                continue 'prefix;
            }
            if !exact && *ver <= newest_acked && acked.get(k).map(|c| c.1) != Some(*ver) {
                continue 'prefix;
            }
        }
        return;
    }
    panic!(
        "{ctx}: recovered state is not the acknowledged prefix\n got:   {got:?}\n acked: {acked:?}\n in flight: {in_flight:?}"
    );
}

#[test]
fn a_crash_at_every_sync_point_recovers_the_acknowledged_prefix() {
    for how in [Checkpointing::Full, Checkpointing::Deltas] {
        crash_at_every_sync_point(how);
    }
}

/// Seeds of the crash test: 6, or `COMBKV_CRASH_SEEDS=<n>` for a soak run
/// (`COMBKV_CRASH_SEEDS=200 cargo test --release -p combkv --test durable
/// a_crash`).
fn crash_seeds() -> u64 {
    match std::env::var("COMBKV_CRASH_SEEDS") {
        Ok(s) => s.trim().parse().expect("COMBKV_CRASH_SEEDS: a number"),
        Err(_) => 6,
    }
}

fn crash_at_every_sync_point(how: Checkpointing) {
    for seed in 0..crash_seeds() {
        const OPS: usize = 150;
        // A run without a crash counts the sync points.
        let total = {
            let fs = FaultyStorage::new(seed);
            let (store, _) = open_as(&fs, how).unwrap();
            let (model, in_flight) = workload(&store, seed, OPS);
            assert!(in_flight.is_empty());
            assert_eq!(dump(&store), model);
            store.shutdown().unwrap();
            let p = store.persistence();
            if let Checkpointing::Deltas = how {
                // The crash points below fall inside delta runs and merges
                // (a merge needs two runs first).
                assert!(p.merges_ok >= 1, "seed {seed}: no merge ran ({p:?})");
            }
            fs.syncs()
        };
        assert!(total > 100, "the workload syncs often ({total})");
        for k in 1..=total {
            let fs = FaultyStorage::new(seed * 1000 + k);
            fs.crash_at_sync(k);
            let (acked, in_flight) = match open_as(&fs, how) {
                Ok((store, _)) => {
                    let r = workload(&store, seed, OPS);
                    if !fs.has_crashed() {
                        // Timing moved a sync point past the end; fine.
                        fs.crash();
                    }
                    drop(store);
                    r
                }
                Err(_) => (State::new(), Vec::new()),
            };
            fs.restart();
            let (store, report) =
                open_as(&fs, how).unwrap_or_else(|e| panic!("{how:?} seed {seed} crash {k}: {e}"));
            let ctx = format!("{how:?} seed {seed} crash at sync {k} ({report})");
            let got = dump(&store);
            assert_recovered(&got, &acked, &in_flight, &ctx);
            // The clock restarts above every recovered version.
            let newest = got.values().map(|c| c.1).max().unwrap_or(0);
            assert!(store.put(b"zz", b"after").unwrap().get() > newest, "{ctx}");
            // And the next checkpoint, delta or full, recovers the same.
            store.checkpoint().unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let again = dump(&store);
            drop(store);
            let (store, report) = open_as(&fs, how).unwrap();
            assert_eq!(dump(&store), again, "{ctx}; then {report}");
        }
    }
}

// ---- fail-stop -------------------------------------------------------------

#[test]
fn a_failed_fsync_makes_the_store_read_only_and_hides_the_write() {
    let fs = FaultyStorage::new(1);
    let (store, _) = open(&fs).unwrap();
    store.put(b"a", b"1").unwrap();
    fs.fail_sync_at(1);
    let err = store.put(b"b", b"2").unwrap_err();
    assert!(matches!(err, Error::ReadOnly(_)));
    assert!(
        err.to_string()
            .starts_with("store is read-only: write-ahead log: injected sync failure"),
        "{err}"
    );
    // Never visible: the store stays at its last durable version.
    assert_eq!(store.get(b"b").unwrap(), None);
    assert_eq!(store.get(b"a").unwrap().unwrap(), &b"1"[..]);
    assert!(matches!(store.put(b"c", b"3"), Err(Error::ReadOnly(_))));
    assert!(matches!(
        store.session().delete(b"a"),
        Err(Error::ReadOnly(_))
    ));
    assert!(matches!(store.clear(), Err(Error::ReadOnly(_))));
    let p = store.persistence();
    assert!(
        p.read_only
            .as_deref()
            .unwrap()
            .contains("injected sync failure")
    );
    assert!(store.shutdown().is_err());
    drop(store);
    let (store, _) = open(&fs).unwrap();
    assert_eq!(store.get(b"a").unwrap().unwrap(), &b"1"[..]);
}

#[test]
fn a_failed_write_makes_the_store_read_only() {
    for mode in [Durability::Always, Durability::EverySec, Durability::None] {
        let fs = FaultyStorage::new(2);
        let cfg = config(&fs).with_mode(mode);
        let (store, _) = Store::open(Config::default(), cfg).unwrap();
        store.put(b"a", b"1").unwrap();
        fs.fail_write_at(1);
        // EverySec and None acknowledge before the write; the failure shows
        // on a later write.
        let mut refused = None;
        for i in 0..200 {
            if let Err(e) = store.put(format!("k{i}").as_bytes(), b"v") {
                refused = Some(e);
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let e = refused.unwrap_or_else(|| panic!("{mode}: writes still accepted"));
        assert!(
            e.to_string()
                .starts_with("store is read-only: write-ahead log: injected write failure"),
            "{mode}: {e}"
        );
    }
}

// ---- torn and corrupt logs -------------------------------------------------

fn segments(fs: &FaultyStorage) -> Vec<std::path::PathBuf> {
    wal_files::segments(fs, DIR)
}

/// Writes `n` keys through a store on `fs` and shuts it down: the log
/// spans at least four segments. Returns them, oldest first.
fn logged_in_segments(fs: &FaultyStorage, n: usize) -> Vec<std::path::PathBuf> {
    {
        let (store, _) = open(fs).unwrap();
        fill(&store, n);
        store.shutdown().unwrap();
    }
    let segs = segments(fs);
    assert!(segs.len() >= 4, "small segments rotate");
    segs
}

fn fill(store: &Store, n: usize) {
    for i in 0..n {
        store
            .put(
                format!("key{i:04}").as_bytes(),
                format!("value{i}").as_bytes(),
            )
            .unwrap();
    }
}

#[test]
fn a_torn_tail_is_cut_at_the_last_valid_record_and_reported() {
    let fs = FaultyStorage::new(3);
    {
        let (store, _) = open(&fs).unwrap();
        fill(&store, 30);
        store.shutdown().unwrap();
    }
    let last = segments(&fs)
        .into_iter()
        .rev()
        .find(|p| fs.file(p).unwrap().len() > 32)
        .unwrap();
    let mut bytes = fs.file(&last).unwrap();
    bytes.truncate(bytes.len() - 3);
    fs.put_file(&last, bytes);
    let (store, report) = open(&fs).unwrap();
    let cut = report.tail_cut.clone().expect("a cut");
    assert!(cut.reason.contains("torn"), "{report}");
    assert!(report.to_string().contains("log cut in"), "{report}");
    // Only the last write is gone.
    assert_eq!(store.range(&Range::all()).unwrap().len(), 29);
    assert_eq!(store.get(b"key0029").unwrap(), None);
    drop(store);
    // The cut was made durable: the next recovery finds a clean log.
    let (store, report) = open(&fs).unwrap();
    assert_eq!(report.tail_cut, None, "{report}");
    assert_eq!(store.range(&Range::all()).unwrap().len(), 29);
}

/// A damaged record with later segments after it is corruption, not a
/// torn tail (corruption.rs has the cases): refused by default, cut only
/// with `truncate_corrupt`, later segments set aside.
#[test]
fn a_corrupt_record_is_cut_only_when_asked_and_later_segments_set_aside() {
    let fs = FaultyStorage::new(4);
    let segs = logged_in_segments(&fs, 60);
    let victim = &segs[1];
    let mut bytes = fs.file(victim).unwrap();
    let at = bytes.len() - 5;
    bytes[at] ^= 0x40;
    fs.put_file(victim, bytes);
    let report_text = combkv::durable::check::check_with(&fs, Path::new(DIR))
        .unwrap()
        .to_string();
    assert!(report_text.contains("CORRUPT at offset"), "{report_text}");
    assert!(matches!(open(&fs), Err(Error::Corrupt(_))));
    let cfg = DurableConfig {
        truncate_corrupt: true,
        ..config(&fs)
    };
    let (store, report) = Store::open(Config::with_node_size(1024), cfg).unwrap();
    let cut = report.tail_cut.clone().unwrap();
    assert!(cut.reason.contains("checksum") && cut.corrupt, "{report}");
    assert_eq!(report.discarded_segments.len(), segs.len() - 2, "{report}");
    // A prefix survives, in order.
    let got = dump(&store);
    let n = got.len();
    assert!(n > 0 && n < 60);
    for i in 0..n {
        assert!(got.contains_key(format!("key{i:04}").as_bytes()));
    }
    // New writes after the cut survive the next recovery.
    store.put(b"later", b"x").unwrap();
    drop(store);
    let (store, report) = open(&fs).unwrap();
    assert_eq!(report.tail_cut, None, "{report}");
    assert_eq!(store.get(b"later").unwrap().unwrap(), &b"x"[..]);
    assert_eq!(dump(&store).len(), n + 1);
}

/// A whole record (checksum intact) of a kind this version does not know
/// was written by a newer combkv: recovery must refuse the directory and
/// change nothing, where cutting the log there would drop acknowledged
/// writes.
#[test]
fn a_record_of_an_unknown_kind_is_refused_not_cut() {
    use combkv::durable::Storage;
    let fs = FaultyStorage::new(4);
    let segs = logged_in_segments(&fs, 60);
    // The last record of a middle segment becomes kind 9, re-checksummed:
    // frames are u32 body length | u32 crc(length ++ body) | body, after a
    // 32-byte header, and a body starts with its kind.
    let victim = &segs[1];
    let mut bytes = fs.file(victim).unwrap();
    let mut at = 32;
    loop {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        if at + 8 + len == bytes.len() {
            break;
        }
        at += 8 + len;
    }
    bytes[at + 8] = 9;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&bytes[at..at + 4]);
    crc.update(&bytes[at + 8..]);
    let crc = crc.finalize().to_le_bytes();
    bytes[at + 4..at + 8].copy_from_slice(&crc);
    fs.put_file(victim, bytes);
    // Every file of the directory with its bytes.
    let files = || -> Vec<_> {
        let names = fs.list(Path::new(DIR)).unwrap();
        names
            .into_iter()
            .map(|n| (fs.file(&Path::new(DIR).join(&n)), n))
            .collect()
    };
    let before = files();

    let check = combkv::durable::check::check_with(&fs, Path::new(DIR))
        .unwrap()
        .to_string();
    assert!(check.contains("REFUSED at offset"), "{check}");
    assert!(check.contains("kind 9"), "{check}");
    match open(&fs) {
        Err(Error::Corrupt(why)) => {
            assert!(
                why.contains("kind 9") && why.contains("nothing was changed"),
                "{why}"
            )
        }
        other => panic!("recovery must refuse, got {:?}", other.map(|(_, r)| r)),
    }
    assert_eq!(before, files(), "recovery changed the directory");
}

// ---- checkpoints -------------------------------------------------------------

#[test]
fn recovery_loads_the_checkpoint_and_replays_the_tail_with_versions_and_ttls() {
    let fs = FaultyStorage::new(5);
    let expiry = far_future();
    let before = {
        let (store, _) = open(&fs).unwrap();
        fill(&store, 500);
        store
            .put_with(b"ttl", b"soon", Expiry::AtMs(expiry))
            .unwrap();
        store.put(b"big", &vec![7u8; 5000]).unwrap();
        let info = store.checkpoint().unwrap();
        assert_eq!(info.items, 502);
        for i in 0..100 {
            store.delete(format!("key{i:04}").as_bytes()).unwrap();
        }
        store.put(b"after", b"checkpoint").unwrap();
        let d = dump(&store);
        store.shutdown().unwrap();
        d
    };
    let (store, report) = open(&fs).unwrap();
    let c = report.checkpoint.clone().expect("a checkpoint loaded");
    assert_eq!(c.items, 502);
    assert_eq!(report.records_replayed, 101, "{report}");
    assert_eq!(dump(&store), before);
    assert_eq!(
        store.len(),
        before.len() as u64,
        "the key count is recovered"
    );
    assert_eq!(
        store.get_item(b"ttl").unwrap().unwrap().expires_at_ms,
        Some(expiry)
    );
    store.collect();
    let n = store.node_counts();
    assert_eq!(n.live_buffers, n.reachable_buffers);
}

/// The sweep skips a store that never held an item with an expiry; a
/// recovered store knows it holds some, whether they came back from a
/// checkpoint or from the log.
#[test]
fn expired_items_recovered_from_a_checkpoint_or_the_log_are_swept() {
    for from_checkpoint in [true, false] {
        let fs = FaultyStorage::new(6 + u64::from(from_checkpoint));
        {
            let (store, _) = open(&fs).unwrap();
            fill(&store, 50);
            let soon = combkv::now_ms() + 50;
            store.put_with(b"gone", b"x", Expiry::AtMs(soon)).unwrap();
            if from_checkpoint {
                store.checkpoint().unwrap();
            }
            store.shutdown().unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
        let (store, report) = open(&fs).unwrap();
        assert_eq!(report.checkpoint.is_some(), from_checkpoint, "{report}");
        let before = store.len();
        assert!(store.get(b"gone").unwrap().is_none(), "expired while down");
        assert_eq!(
            store.sweep_expired(10_000),
            1,
            "checkpoint: {from_checkpoint}"
        );
        assert_eq!(store.len(), before - 1);
    }
}

#[test]
fn a_corrupt_newest_checkpoint_falls_back_to_the_previous_one() {
    let fs = FaultyStorage::new(6);
    let before = {
        let (store, _) = open(&fs).unwrap();
        fill(&store, 200);
        store.checkpoint().unwrap();
        for i in 0..50 {
            store
                .put(format!("key{i:04}").as_bytes(), b"second")
                .unwrap();
        }
        let newest = store.checkpoint().unwrap();
        store.put(b"tail", b"x").unwrap();
        let d = dump(&store);
        store.shutdown().unwrap();
        let path = Path::new(DIR).join(&newest.file);
        let mut bytes = fs.file(&path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 1;
        fs.put_file(&path, bytes);
        d
    };
    let (store, report) = open(&fs).unwrap();
    assert_eq!(report.skipped_checkpoints.len(), 1, "{report}");
    assert!(report.to_string().contains("skipped corrupt checkpoint"));
    assert_eq!(dump(&store), before, "nothing lost by falling back");
}

#[test]
fn checkpoints_remove_log_segments_the_oldest_kept_checkpoint_covers() {
    let fs = FaultyStorage::new(7);
    let (store, _) = open_as(&fs, Checkpointing::Full).unwrap();
    fill(&store, 100);
    store.checkpoint().unwrap();
    let after_first = segments(&fs).len();
    fill(&store, 100);
    store.checkpoint().unwrap();
    fill(&store, 10);
    store.checkpoint().unwrap();
    let after_third = segments(&fs).len();
    assert!(
        after_third < after_first + 5,
        "{after_first} -> {after_third}"
    );
    let p = store.persistence();
    assert_eq!(p.checkpoints_ok, 3);
    assert_eq!(p.wal_segments, after_third);
    let d = dump(&store);
    drop(store);
    let (store, _) = open(&fs).unwrap();
    assert_eq!(dump(&store), d);
}

#[test]
fn checkpoints_start_by_log_size_and_in_the_background() {
    let fs = FaultyStorage::new(8);
    let cfg = DurableConfig {
        checkpoint_wal_bytes: 2000,
        ..config(&fs)
    };
    let (store, _) = Store::open(Config::default(), cfg).unwrap();
    fill(&store, 200);
    let mut waited = 0;
    while store.persistence().checkpoints_ok == 0 {
        std::thread::sleep(Duration::from_millis(10));
        waited += 1;
        assert!(waited < 500, "no checkpoint by size");
    }
    // BGSAVE: at most one at a time.
    let started = store.checkpoint_in_background().unwrap();
    if started {
        assert!(
            !store.checkpoint_in_background().unwrap() || store.persistence().checkpoints_ok > 1
        );
    }
    store.shutdown().unwrap();
    assert!(store.persistence().executor.completed >= 1);
}

// ---- sessions, clear, versions ----------------------------------------------

#[test]
fn a_session_pays_one_group_commit_for_many_writes() {
    let fs = FaultyStorage::new(9);
    let (store, _) = open(&fs).unwrap();
    let before = store.persistence().fsyncs;
    let s = store.session();
    for i in 0..100 {
        s.put(format!("s{i:03}").as_bytes(), b"v").unwrap();
    }
    assert_eq!(s.insert(b"s000", b"again").unwrap(), None);
    s.commit().unwrap();
    let fsyncs = store.persistence().fsyncs - before;
    assert!(fsyncs <= 3, "{fsyncs} fsyncs for one session");
    assert_eq!(store.range(&Range::all()).unwrap().len(), 100);
}

#[test]
fn clear_is_logged_and_replayed() {
    let fs = FaultyStorage::new(10);
    {
        let (store, _) = open(&fs).unwrap();
        fill(&store, 300);
        store.checkpoint().unwrap();
        fill(&store, 50);
        store.clear().unwrap();
        assert_eq!(store.range(&Range::all()).unwrap().len(), 0);
        store.put(b"survivor", b"1").unwrap();
        store.shutdown().unwrap();
    }
    let (store, _) = open(&fs).unwrap();
    let got = dump(&store);
    assert_eq!(got.keys().collect::<Vec<_>>(), vec![&b"survivor".to_vec()]);
    assert_eq!(store.len(), 1);
}

#[test]
fn versions_survive_recovery_and_cas_tokens_stay_valid() {
    let dir = std::env::temp_dir().join(format!("combkv-durable-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let v = {
        let (store, _) = Store::open(Config::default(), DurableConfig::new(&dir)).unwrap();
        store.put(b"a", b"1").unwrap();
        let v = store.put(b"b", b"2").unwrap();
        store.checkpoint().unwrap();
        store.put(b"c", b"3").unwrap();
        v
    };
    let (store, report) = Store::open(Config::default(), DurableConfig::new(&dir)).unwrap();
    assert!(report.checkpoint.is_some());
    assert_eq!(store.get_item(b"b").unwrap().unwrap().version, v);
    assert!(
        store
            .cas(b"b", v.get(), b"new", Expiry::Keep)
            .unwrap()
            .is_some()
    );
    let report = combkv::check(&dir).unwrap();
    assert!(report.is_clean(), "{report}");
    assert!(
        report.to_string().contains("recovery would load ckpt-"),
        "{report}"
    );
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn concurrent_writers_lose_nothing_acknowledged_in_a_crash() {
    let fs = FaultyStorage::new(11);
    let (store, _) = open(&fs).unwrap();
    let store = Arc::new(store);
    let acked: Vec<_> = (0..4)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                for i in 0..400 {
                    let k = format!("t{t}-{i:04}").into_bytes();
                    match store.put(&k, b"v") {
                        Ok(v) => acked.push((k, v.get())),
                        Err(_) => break,
                    }
                }
                acked
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    fs.crash();
    let acked: Vec<(Vec<u8>, u64)> = acked.into_iter().flat_map(|h| h.join().unwrap()).collect();
    drop(store);
    fs.restart();
    let (store, _) = open(&fs).unwrap();
    let got = dump(&store);
    for (k, v) in &acked {
        assert_eq!(got.get(k).map(|c| c.1), Some(*v), "acknowledged {k:?} lost");
    }
}

/// memcached client flags live in checkpoints and log records alike.
#[test]
fn client_flags_survive_checkpoint_and_log_replay() {
    use combkv::{Flags, Write};
    let fs = FaultyStorage::new(11);
    let put = |store: &Store, k: &[u8], flags: u32| {
        store
            .write_with(k, |_| {
                let w = Write::Put {
                    value: b"v".to_vec(),
                    expiry: Expiry::Never,
                    flags: Flags::Set(flags),
                };
                (w, ())
            })
            .unwrap();
    };
    {
        let (store, _) = open(&fs).unwrap();
        put(&store, b"in-checkpoint", 7);
        store.checkpoint().unwrap();
        put(&store, b"in-log", u32::MAX);
        store.append(b"in-checkpoint", b"+").unwrap();
        store.shutdown().unwrap();
    }
    let (store, report) = open(&fs).unwrap();
    assert!(report.checkpoint.is_some());
    let flags = |k: &[u8]| store.get_item(k).unwrap().unwrap().flags;
    assert_eq!(flags(b"in-checkpoint"), 7, "{report}");
    assert_eq!(flags(b"in-log"), u32::MAX, "{report}");
}
