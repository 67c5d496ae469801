//! The cache of recent entries: what is read from memory and what from
//! the segments, its limit, and reads that race truncations and purges.

use super::*;

/// Memory holds what is not yet written and a bounded cache of the rest:
/// with a cache of 0 bytes, appends the I/O thread has not written are
/// read from memory (the leader's replication reads its own appends at
/// once), and once written every entry is read back from its segment,
/// after a reopen too. The old log kept every entry in memory.
#[test]
fn unwritten_appends_are_read_from_memory_and_the_rest_from_segments() {
    let gated = Gated {
        inner: FaultyStorage::new(11),
        shut: Arc::default(),
    };
    let storage: Arc<dyn Storage> = Arc::new(gated.clone());
    let all: Vec<Entry> = (1..=40)
        .map(|i| sized(1, i, 50 + (i as usize * 37) % 400))
        .collect();
    let mut log = open_with(&storage, 2048, 0, Some(1));
    rt().block_on(async {
        log.blocking_append(all[..30].to_vec()).await.unwrap();
        assert_eq!(log.cached(), (0, 0));
        assert_eq!(log.try_get_log_entries(..).await.unwrap(), all[..30]);
    });
    // Held unwritten: the I/O thread waits in its write.
    gated.set(true);
    let mut writer = log.clone();
    let rest = all[30..].to_vec();
    let appending = std::thread::spawn(move || {
        rt().block_on(writer.blocking_append(rest))
            .map_err(|e| e.to_string())
    });
    rt().block_on(async {
        while log.get_log_state().await.unwrap().last_log_id != Some(log_id(1, 40)) {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert_eq!(log.cached().0, 10);
        assert_eq!(log.try_get_log_entries(..).await.unwrap(), all);
        assert_eq!(log.try_get_log_entries(28..33).await.unwrap(), all[27..32]);
    });
    gated.set(false);
    appending.join().unwrap().unwrap();
    assert_eq!(log.cached(), (0, 0));
    rt().block_on(async {
        assert_eq!(log.try_get_log_entries(..).await.unwrap(), all);
        assert_eq!(log.try_get_log_entries(5..=5).await.unwrap(), all[4..5]);
    });
    drop(log);
    let mut log = open_with(&storage, 2048, 0, Some(1));
    rt().block_on(async {
        assert_eq!(log.try_get_log_entries(..).await.unwrap(), all);
        assert_eq!(log.try_get_log_entries(39..).await.unwrap(), all[38..]);
    });
}

/// The cache keeps the newest written entries up to its limit, and what it
/// evicted is read from the segments; a follower's request
/// (`limited_get_log_entries`) stops after about 8 MiB.
#[test]
fn the_cache_keeps_recent_entries_within_its_limit() {
    let storage: Arc<dyn Storage> = Arc::new(FaultyStorage::new(12));
    let limit = 64 << 10;
    let mut log = open_with(&storage, 256 << 10, limit, Some(2));
    let all: Vec<Entry> = (1..=300)
        .map(|i| sized(1, i, 1000 + (i as usize * 91) % 3000))
        .collect();
    rt().block_on(async {
        for chunk in all.chunks(7) {
            log.blocking_append(chunk.to_vec()).await.unwrap();
            let (n, bytes) = log.cached();
            assert!(bytes <= limit, "{n} entries, {bytes} bytes cached");
        }
        let (n, _) = log.cached();
        assert!((10..60).contains(&n), "{n} entries cached");
        assert_eq!(log.try_get_log_entries(..).await.unwrap(), all);
        assert_eq!(
            log.try_get_log_entries(100..250).await.unwrap(),
            all[99..249]
        );
        // Large entries: a follower's request is cut after its budget.
        let big: Vec<Entry> = (301..=312).map(|i| sized(2, i, 1 << 20)).collect();
        log.blocking_append(big.clone()).await.unwrap();
        let got = log.limited_get_log_entries(301, 313).await.unwrap();
        assert!((8..12).contains(&got.len()), "{} entries", got.len());
        assert_eq!(got, big[..got.len()]);
        assert_eq!(log.try_get_log_entries(301..).await.unwrap(), big);
    });
}

/// Truncating and purging change the log ids, the cache and the segments
/// alike: reads after them (cached or from disk) and after a reopen see
/// exactly the entries the log should hold.
#[test]
fn truncate_and_purge_keep_the_index_and_the_cache_consistent() {
    let storage: Arc<dyn Storage> = Arc::new(FaultyStorage::new(13));
    let mut model: Vec<Entry> = Vec::new();
    let mut log = open_with(&storage, 1500, 1200, Some(1));
    rt().block_on(async {
        let batch: Vec<Entry> = (1..=60).map(|i| sized(1, i, 100 + i as usize)).collect();
        log.blocking_append(batch.clone()).await.unwrap();
        model.extend(batch);
        // Into entries long evicted, in a segment before the last.
        log.truncate(log_id(1, 31)).await.unwrap();
        model.truncate(30);
        assert_eq!(log.try_get_log_entries(..).await.unwrap(), model);
        assert_eq!(log.try_get_log_entries(29..40).await.unwrap(), model[28..]);
        let batch: Vec<Entry> = (31..=50).map(|i| sized(2, i, 300)).collect();
        log.blocking_append(batch.clone()).await.unwrap();
        model.extend(batch);
        assert_eq!(log.try_get_log_entries(..).await.unwrap(), model);
        // Into entries still cached.
        log.truncate(log_id(2, 48)).await.unwrap();
        model.truncate(47);
        let batch: Vec<Entry> = (48..=55).map(|i| sized(3, i, 20)).collect();
        log.blocking_append(batch.clone()).await.unwrap();
        model.extend(batch);
        assert_eq!(log.try_get_log_entries(..).await.unwrap(), model);
        log.purge(log_id(2, 40)).await.unwrap();
        model.retain(|e| e.log_id.index > 40);
        assert_eq!(log.try_get_log_entries(..).await.unwrap(), model);
        assert_eq!(log.try_get_log_entries(0..45).await.unwrap(), model[..4]);
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(log_id(2, 40)));
        assert_eq!(state.last_log_id, Some(log_id(3, 55)));
        // Purged past the end (a snapshot installed): nothing is left, and
        // appends go on after it.
        log.purge(log_id(3, 70)).await.unwrap();
        model.clear();
        assert!(log.try_get_log_entries(..).await.unwrap().is_empty());
        let batch: Vec<Entry> = (71..=80).map(|i| sized(4, i, 200)).collect();
        log.blocking_append(batch.clone()).await.unwrap();
        model.extend(batch);
        assert_eq!(log.try_get_log_entries(..).await.unwrap(), model);
    });
    drop(log);
    let mut log = open_with(&storage, 1500, 1200, Some(1));
    rt().block_on(async {
        assert_eq!(log.try_get_log_entries(..).await.unwrap(), model);
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(log_id(3, 70)));
    });
}

/// Reads `1..=20` on another thread, paused between its look at the
/// state and its look-up in the segments while `between` changes the log.
fn read_overtaken_by(
    log: &mut LogStore,
    between: impl FnOnce(&mut LogStore),
) -> Result<Vec<Entry>, String> {
    let (reached_tx, reached_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let mut reader = log.clone();
    let reading = std::thread::spawn(move || {
        let mut first = true;
        BETWEEN_LOOKS.set(Some(Box::new(move || {
            if std::mem::take(&mut first) {
                reached_tx.send(()).unwrap();
                go_rx.recv().unwrap();
            }
        })));
        rt().block_on(reader.try_get_log_entries(1..=20))
            .map_err(|e| e.to_string())
    });
    reached_rx.recv().unwrap();
    between(log);
    go_tx.send(()).unwrap();
    reading.join().unwrap()
}

/// A read looks at the state (which entries the log holds, which are
/// cached) and then up in the segments where the others are. A truncation
/// or purge changes the state and then the segments; one that lands
/// between the read's two looks removed records the first look counted
/// on, and the read must look again (and return the log as it stands
/// after it), as it does when the change lands after its look-up, not fail
/// with "neither in memory nor in a segment", or find the record of the
/// entry that replaced one. openraft takes a read's error for a failed
/// disk and stops the node. This pauses the reader there.
#[test]
fn a_read_overtaken_by_a_truncation_or_purge_looks_again() {
    let all: Vec<Entry> = (1..=20).map(|i| sized(1, i, 100)).collect();
    // No cache: every entry, once written, is read from its segment. One
    // append each, so that they fill segments of four (a segment rolls
    // over between appends).
    let fresh = |seed| {
        let storage: Arc<dyn Storage> = Arc::new(FaultyStorage::new(seed));
        let mut log = open_with(&storage, 400, 0, Some(1));
        rt().block_on(async {
            for e in &all {
                log.blocking_append([e.clone()]).await.unwrap();
            }
        });
        assert_eq!(log.cached(), (0, 0));
        assert_eq!(log.segments.lock().list.len(), 5);
        (storage, log)
    };

    let (storage, mut log) = fresh(15);
    let got = read_overtaken_by(&mut log, |log| {
        rt().block_on(log.purge(log_id(1, 10))).unwrap();
    });
    // The segments of 1..=8 are gone.
    let names = storage.list(Path::new("/raft")).unwrap();
    assert!(!names.iter().any(|n| n == &segment::segment_name(1)));
    assert_eq!(got.as_deref(), Ok(&all[10..]));

    // Truncated, and other entries written where the old ones were.
    let (_, mut log) = fresh(16);
    let again: Vec<Entry> = (5..=8).map(|i| sized(2, i, 100)).collect();
    let got = read_overtaken_by(&mut log, |log| {
        rt().block_on(async {
            log.truncate(log_id(1, 5)).await.unwrap();
            log.blocking_append(again.clone()).await.unwrap();
        });
        assert_eq!(log.cached(), (0, 0));
    });
    let want: Vec<Entry> = all[..4].iter().chain(&again).cloned().collect();
    assert_eq!(got, Ok(want));
}
