//! The log against a model of its entries, and damage judged by what was
//! synced.

use super::*;

/// A reader of random ranges of the log `shared` holds (none while it is
/// reopened), until `stop`: every entry it gets must be whole and in order.
fn spawn_reader(
    seed: u64,
    shared: Arc<parking_lot::RwLock<Option<LogStore>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    use rand::{Rng, SeedableRng};
    std::thread::spawn(move || {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed + 1000);
        let rt = rt();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let a = rng.random_range(0..300);
            let b = a + rng.random_range(0..60);
            let slot = shared.read();
            let Some(mut log) = slot.clone() else {
                continue;
            };
            let got = rt.block_on(log.try_get_log_entries(a..b)).unwrap();
            drop(log);
            drop(slot);
            assert!(got.iter().all(whole), "seed {seed}: a damaged entry");
            assert!(
                got.windows(2)
                    .all(|w| w[1].log_id.index == w[0].log_id.index + 1),
                "seed {seed}: entries out of order"
            );
        }
    })
}

/// Appends, truncations, purges and reopens drawn at random, checked
/// against a `BTreeMap` after every step, with caches from none to all and
/// small segments; on the I/O thread a reader thread meanwhile reads
/// ranges at random, and every entry it gets must be whole and in order.
/// The cache stays within its limit throughout.
#[test]
fn the_log_behaves_like_a_map_of_its_entries() {
    use rand::{Rng, SeedableRng};
    for seed in 0..24u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let cache_bytes = [0, 900, 6000, 1 << 20][seed as usize % 4];
        // Odd seeds: a follower's appends, in the caller.
        let own_id = if seed % 2 == 0 { Some(1) } else { Some(2) };
        let segment_bytes = [400, 3000][seed as usize / 4 % 2];
        let storage: Arc<dyn Storage> = Arc::new(FaultyStorage::new(seed));
        let mut model: std::collections::BTreeMap<u64, Entry> = Default::default();
        let mut purged: Option<LogId> = None;
        let mut term = 1;
        let mut log = open_with(&storage, segment_bytes, cache_bytes, own_id);
        // The reader's handle, taken away while the log is reopened (two
        // open logs on one directory would be two writers).
        let shared = Arc::new(parking_lot::RwLock::new(Some(log.clone())));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = spawn_reader(seed, Arc::clone(&shared), Arc::clone(&stop));
        rt().block_on(async move {
            for step in 0..300 {
                let next = model
                    .last_key_value()
                    .map_or(purged.next_index().max(1), |(i, _)| i + 1);
                match rng.random_range(0..100) {
                    0..50 => {
                        let n = rng.random_range(1..5);
                        let batch: Vec<Entry> = (next..next + n)
                            .map(|i| sized(term, i, rng.random_range(0..300)))
                            .collect();
                        log.blocking_append(batch.clone()).await.unwrap();
                        model.extend(batch.into_iter().map(|e| (e.log_id.index, e)));
                    }
                    50..60 if !model.is_empty() => {
                        let first = *model.keys().next().unwrap();
                        let at = rng.random_range(first..next);
                        let id = model[&at].log_id;
                        log.truncate(id).await.unwrap();
                        model.split_off(&at);
                        term += 1;
                    }
                    60..70 if !model.is_empty() => {
                        let first = *model.keys().next().unwrap();
                        let upto = rng.random_range(first..next);
                        let id = model[&upto].log_id;
                        log.purge(id).await.unwrap();
                        model = model.split_off(&(upto + 1));
                        purged = Some(id);
                    }
                    70..75 => {
                        let mut slot = shared.write();
                        *slot = None;
                        drop(log);
                        log = open_with(&storage, segment_bytes, cache_bytes, own_id);
                        *slot = Some(log.clone());
                    }
                    _ => {
                        let a = rng.random_range(0..next + 3);
                        let b = a + rng.random_range(0..40);
                        let want: Vec<Entry> = model.range(a..b).map(|(_, e)| e.clone()).collect();
                        assert_eq!(
                            log.try_get_log_entries(a..b).await.unwrap(),
                            want,
                            "seed {seed} step {step}: {a}..{b}"
                        );
                    }
                }
                let (n, bytes) = log.cached();
                assert!(
                    bytes <= cache_bytes,
                    "seed {seed} step {step}: {n} entries, {bytes} bytes cached"
                );
                let state = log.get_log_state().await.unwrap();
                assert_eq!(state.last_purged_log_id, purged, "seed {seed} step {step}");
                assert_eq!(
                    state.last_log_id,
                    model.values().last().map(|e| e.log_id).or(purged),
                    "seed {seed} step {step}"
                );
            }
            let want: Vec<Entry> = model.values().cloned().collect();
            assert_eq!(log.try_get_log_entries(..).await.unwrap(), want);
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        reader.join().unwrap();
    }
}

/// What was synced is recorded (the `synced` file), and a bad record below
/// it in the last segment is corruption, not a torn tail: the entries there
/// may have been acknowledged to a leader, and the log refuses to open,
/// naming the file and the offset, and cuts nothing. Past the recorded
/// point the same damage is a torn tail and is cut. The old log cut any
/// damage in its last segment as a torn tail.
#[test]
fn damage_below_what_was_synced_is_corruption_above_it_a_torn_tail() {
    let storage = Arc::new(FaultyStorage::new(14));
    let dynamic: Arc<dyn Storage> = storage.clone();
    let dir = Path::new("/raft");
    let path = dir.join(segment::segment_name(1));
    rt().block_on(async {
        let (mut log, _) = open(&dynamic, 1 << 20).unwrap();
        for i in 1..=20 {
            log.blocking_append([sized(1, i, 200)]).await.unwrap();
        }
    });
    let synced: Option<segment::Synced> = segment::read_small(&*dynamic, dir, segment::SYNCED_FILE)
        .unwrap()
        .flatten();
    let read = segment::read_segment(&*dynamic, &path).unwrap();
    let records = read.valid_bytes;
    let offset = |n: usize| read.entries[n - 1].0 as usize;
    assert_eq!(
        synced,
        Some(segment::Synced {
            segment: 1,
            bytes: records
        })
    );
    let intact = storage.file(&path).unwrap();
    // A flipped byte in the middle of the segment, below what was synced.
    let mut flipped = intact.clone();
    flipped[offset(10) + 100] ^= 0x40;
    // Zeros where synced records were: the records end too early.
    let mut zeroed = intact.clone();
    zeroed[offset(10)..records as usize].fill(0);
    for (bad, says) in [
        (&flipped, "fails its checksum"),
        (&zeroed, "the records end"),
    ] {
        storage.put_file(&path, bad.clone());
        match open(&dynamic, 1 << 20) {
            Err(e @ OpenError::Corrupt { .. }) => {
                let msg = e.to_string();
                for part in [
                    "the Raft log is corrupt",
                    "/raft/seg-00000000000000000001.log",
                    &format!("at byte {}", offset(10)),
                    says,
                    &format!("below the {records} bytes synced"),
                ] {
                    assert!(msg.contains(part), "{part:?} not in {msg:?}");
                }
            }
            other => panic!("opened a log damaged below what was synced: {other:?}"),
        }
        // Nothing was cut.
        assert_eq!(&storage.file(&path).unwrap(), bad);
    }
    // The record lags what is synced (it is written lazily): damage past
    // the point it names is cut as a torn tail.
    segment::write_small(
        &*dynamic,
        dir,
        segment::SYNCED_FILE,
        &Some(segment::Synced {
            segment: 1,
            bytes: offset(11) as u64,
        }),
        true,
    )
    .unwrap();
    let mut torn = intact.clone();
    torn[offset(15) + 100] ^= 0x40;
    storage.put_file(&path, torn);
    let (mut log, report) = open(&dynamic, 1 << 20).unwrap();
    let (file, at, _) = report.torn_tail.expect("a torn tail");
    assert!(file.ends_with("seg-00000000000000000001.log"), "{file}");
    assert_eq!(at, offset(15) as u64);
    assert_eq!(
        rt().block_on(indexes(&mut log)),
        (1..=14).collect::<Vec<_>>()
    );
    drop(log);
}

/// A segment truncated to nothing and begun again under the same name with
/// shorter records, at once: the record of the old segment's synced bytes
/// (saved lazily after its first append) must not condemn the new one
/// after a crash. The lazy save of the lowered record waits out its
/// interval; the truncation lowers it durably itself. (A crash keeps a
/// random part of the lazily written file, so several seeds.)
#[test]
fn a_segment_begun_again_after_a_truncation_is_judged_by_its_own_synced_bytes() {
    for seed in 0..64 {
        let storage = Arc::new(FaultyStorage::new(seed));
        let dynamic: Arc<dyn Storage> = storage.clone();
        rt().block_on(async {
            let (mut log, _) = open(&dynamic, 1 << 20).unwrap();
            for i in 1..=20 {
                log.blocking_append([sized(1, i, 200)]).await.unwrap();
            }
            log.truncate(log_id(1, 1)).await.unwrap();
            log.blocking_append((1..=5).map(|i| sized(2, i, 10)))
                .await
                .unwrap();
            storage.crash();
        });
        storage.restart();
        let (mut log, _) = open(&dynamic, 1 << 20).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let got = rt().block_on(log.try_get_log_entries(..)).unwrap();
        assert_eq!(got, (1..=5).map(|i| sized(2, i, 10)).collect::<Vec<_>>());
    }
}
