//! Logs that sync through the node's journal: every append it reported
//! flushed survives a crash at any sync point (of the journal, of its
//! rotations, of the logs' own files), with truncations, purges and
//! followers' appends among them; records of a log removed and begun
//! again in the same directory are not replayed into the new one.

use std::path::PathBuf;

use super::*;
use crate::log_store::journal::{self, Journal};

const BASE: &str = "/node";

fn log_dir(g: u64) -> PathBuf {
    Path::new(BASE).join(format!("groups/{g}/log"))
}

/// Group `g`'s log, through `journal`: group 2 as a follower, the others
/// as the leader (both on the node's log writer: the log is journaled).
fn open_log(
    storage: &Arc<dyn Storage>,
    journal: &Arc<Journal>,
    g: u64,
) -> Result<LogStore, OpenError> {
    let own_id = if g == 2 { Some(2) } else { Some(1) };
    LogStore::open_journaled(
        Arc::clone(storage),
        &log_dir(g),
        LogOptions {
            segment_bytes: 300,
            own_id,
            ..LogOptions::default()
        },
        Some(journal),
    )
    .map(|(log, _)| log)
}

/// What each log acknowledged: the entries it reported flushed and not
/// removed since, by index.
type Model = Vec<std::collections::BTreeMap<u64, LogId>>;

/// Group 3's log ids a truncation removed (it returned): they never come
/// back.
type Gone = Vec<LogId>;

async fn run(storage: &Arc<dyn Storage>, model: &mut Model, purged: &mut [u64], gone: &mut Gone) {
    let Ok((journal, _)) = Journal::open_rotating(Arc::clone(storage), Path::new(BASE), 700) else {
        return;
    };
    let mut logs = Vec::new();
    for g in 1..=3 {
        match open_log(storage, &journal, g) {
            Ok(l) => logs.push(l),
            Err(_) => return,
        }
    }
    for round in 1..=8u64 {
        let mut next: Vec<u64> = (0..3)
            .map(|i| model[i].keys().next_back().map_or(purged[i] + 1, |l| l + 1))
            .collect();
        if round == 5 {
            // A truncation of acknowledged entries (a follower's log that
            // a new leader overwrites): the next appends replace them.
            // (Out of the model first: a truncation that fails may have
            // been done.)
            let since = next[2] - 2;
            let removed = model[2].split_off(&since);
            if logs[2].truncate(log_id(round, since)).await.is_err() {
                return;
            }
            gone.extend(removed.into_values());
            next[2] = since;
        }
        let batch = |i: usize| (next[i]..next[i] + 3).map(move |x| entry(round, x));
        let (a, b, c) = {
            let (l0, rest) = logs.split_at_mut(1);
            let (l1, l2) = rest.split_at_mut(1);
            tokio::join!(
                l0[0].blocking_append(batch(0)),
                l1[0].blocking_append(batch(1)),
                l2[0].blocking_append(batch(2)),
            )
        };
        for (i, r) in [a, b, c].into_iter().enumerate() {
            if r.is_err() {
                return;
            }
            for x in next[i]..next[i] + 3 {
                model[i].insert(x, log_id(round, x));
            }
        }
        if round == 4 {
            let upto = next[0] + 1;
            purged[0] = upto;
            model[0] = model[0].split_off(&(upto + 1));
            if logs[0].purge(log_id(round, upto)).await.is_err() {
                return;
            }
        }
    }
}

#[test]
fn a_crash_at_every_sync_point_keeps_what_the_journal_flushed() {
    let mut point = 1;
    loop {
        let faulty = Arc::new(FaultyStorage::new(point));
        let storage: Arc<dyn Storage> = faulty.clone();
        faulty.crash_at_sync(point);
        let mut model: Model = vec![Default::default(); 3];
        let mut purged = vec![0u64; 3];
        let mut gone = Gone::new();
        let rt = threaded_rt(2);
        rt.block_on(run(&storage, &mut model, &mut purged, &mut gone));
        drop(rt);
        let crashed = faulty.has_crashed();
        faulty.restart();
        let (journal, _) = Journal::open_rotating(Arc::clone(&storage), Path::new(BASE), 700)
            .unwrap_or_else(|e| panic!("sync point {point}: the journal: {e}"));
        for g in 1..=3u64 {
            let i = g as usize - 1;
            let mut log = open_log(&storage, &journal, g)
                .unwrap_or_else(|e| panic!("sync point {point}: group {g}: {e}"));
            let got = rt_block(log.try_get_log_entries(..)).unwrap();
            let ids: Vec<u64> = got.iter().map(|e| e.log_id.index).collect();
            if let (Some(&f), Some(&l)) = (ids.first(), ids.last()) {
                assert_eq!(
                    ids,
                    (f..=l).collect::<Vec<_>>(),
                    "sync point {point}: group {g}: a gap"
                );
            }
            if let Some(e) = got.iter().find(|e| g == 3 && gone.contains(&e.log_id)) {
                panic!(
                    "sync point {point}: group {g}: truncated entry {} is back",
                    e.log_id
                );
            }
            for (&x, &id) in &model[i] {
                let e = got.iter().find(|e| e.log_id.index == x).unwrap_or_else(|| {
                    panic!("sync point {point}: group {g}: flushed entry {x} lost ({ids:?})")
                });
                assert_eq!(e.log_id, id, "sync point {point}: group {g}: entry {x}");
                assert_eq!(
                    format!("{:?}", e.payload),
                    format!("{:?}", entry(id.leader_id.term, x).payload),
                    "sync point {point}: group {g}: entry {x}'s payload"
                );
            }
        }
        if !crashed {
            break;
        }
        point += 1;
    }
    assert!(point > 30, "only {point} sync points");
}

/// A runtime with `workers` threads: appends of several logs at once.
fn threaded_rt(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap()
}

fn rt_block<F: std::future::Future>(f: F) -> F::Output {
    rt().block_on(f)
}

/// A replica removed and hosted again in the same directory: the journal
/// still holds the old log's records (never rotated away), and they start
/// past where the new log begins. Replayed into it, they would leave a gap
/// (a start that fails) or entries of another log.
#[test]
fn a_log_begun_again_in_its_directory_gets_none_of_the_old_ones_records() {
    let faulty = Arc::new(FaultyStorage::new(7));
    let storage: Arc<dyn Storage> = faulty.clone();
    rt().block_on(async {
        let (journal, _) = Journal::open(Arc::clone(&storage), Path::new(BASE)).unwrap();
        let mut old = open_log(&storage, &journal, 1).unwrap();
        old.purge(log_id(1, 59)).await.unwrap();
        old.blocking_append((60..=62).map(|i| entry(1, i)))
            .await
            .unwrap();
        drop(old);
        let dir = log_dir(1);
        for name in storage.list(&dir).unwrap() {
            storage.remove(&dir.join(name)).unwrap();
        }
        storage.sync_dir(&dir).unwrap();
        let mut new = open_log(&storage, &journal, 1).unwrap();
        new.purge(log_id(5, 50)).await.unwrap();
        new.blocking_append((51..=53).map(|i| entry(5, i)))
            .await
            .unwrap();
    });
    faulty.crash();
    faulty.restart();
    let (journal, _) = Journal::open(Arc::clone(&storage), Path::new(BASE)).unwrap();
    let mut log = open_log(&storage, &journal, 1).unwrap();
    let got = rt_block(log.try_get_log_entries(..)).unwrap();
    let ids: Vec<LogId> = got.iter().map(|e| e.log_id).collect();
    assert_eq!(ids, (51..=53).map(|i| log_id(5, i)).collect::<Vec<_>>());
}

/// With the journal, a log's appends are synced in the journal, not in
/// their segments: 400 appends over 8 logs make a handful of syncs besides
/// the journal's (a segment's directory entry, the fresh records), where
/// each log syncing its own segment made one per append.
#[test]
fn appends_are_synced_in_the_journal_not_in_their_segments() {
    let faulty = Arc::new(FaultyStorage::new(3));
    let storage: Arc<dyn Storage> = faulty.clone();
    let (journal, _) = Journal::open(Arc::clone(&storage), Path::new(BASE)).unwrap();
    let logs: Vec<LogStore> = (1..=8)
        .map(|g| {
            LogStore::open_journaled(
                Arc::clone(&storage),
                &log_dir(g),
                LogOptions::default(),
                Some(&journal),
            )
            .unwrap()
            .0
        })
        .collect();
    let rt = threaded_rt(4);
    let syncs = faulty.syncs();
    let journal_syncs = journal.fsync_durations().count();
    rt.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for mut log in logs {
            tasks.spawn(async move {
                for x in 1..=50 {
                    log.blocking_append([entry(1, x)]).await.unwrap();
                }
            });
        }
        while let Some(r) = tasks.join_next().await {
            r.unwrap();
        }
    });
    let journal_syncs = journal.fsync_durations().count() - journal_syncs;
    let others = faulty.syncs() - syncs - journal_syncs;
    assert!(
        journal_syncs > 0 && others < 40,
        "400 appends: {journal_syncs} journal syncs and {others} others"
    );
}

/// The file work of every log of a node is done by the node's one log
/// writer: eight logs taking appends at once, one of them synced once a
/// second (not in the journal), have no I/O thread of their own, all
/// eight are served by the writer, and every append is flushed; a log
/// dropped is served no more.
#[test]
fn the_logs_of_a_node_share_one_writer_thread() {
    let storage: Arc<dyn Storage> = Arc::new(FaultyStorage::new(11));
    let (journal, _) = Journal::open(Arc::clone(&storage), Path::new(BASE)).unwrap();
    let mut logs: Vec<LogStore> = (1..=7)
        .map(|g| open_log(&storage, &journal, g).unwrap())
        .collect();
    let (every_sec, _) = LogStore::open_journaled(
        Arc::clone(&storage),
        &log_dir(8),
        LogOptions {
            sync: SyncPolicy::EverySec,
            ..LogOptions::default()
        },
        Some(&journal),
    )
    .unwrap();
    assert!(every_sec.journal.is_none(), "synced in the journal");
    logs.push(every_sec);
    // Group 2's log is a follower's (see `open_log`): its appends go to
    // the writer as well.
    assert!(logs.iter().all(|l| !l.io.own_thread()));
    assert_eq!(journal.writer().served(), 8);
    let rt = threaded_rt(4);
    rt.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for mut log in logs.drain(..) {
            tasks.spawn(async move {
                for x in 1..=20 {
                    log.blocking_append([entry(1, x)]).await.unwrap();
                }
                log
            });
        }
        while let Some(log) = tasks.join_next().await {
            let mut log = log.unwrap();
            let got = log.try_get_log_entries(..).await.unwrap();
            assert_eq!(got.len(), 20);
            logs.push(log);
        }
    });
    logs.truncate(5);
    assert_eq!(journal.writer().served(), 5);
}

/// A replay is worked out whole before the log is touched: one whose
/// records would leave a gap fails with the log as it was, not with the
/// entries a later record truncated written back over acknowledged ones.
#[test]
fn a_replay_that_cannot_be_done_leaves_the_log_as_it_was() {
    let storage: Arc<dyn Storage> = Arc::new(FaultyStorage::new(5));
    let dir = log_dir(1);
    let held: Vec<LogId> = (1..=4)
        .map(|i| log_id(1, i))
        .chain((5..=7).map(|i| log_id(2, i)))
        .collect();
    rt().block_on(async {
        let (mut log, _) =
            LogStore::open(Arc::clone(&storage), &dir, LogOptions::default()).unwrap();
        log.blocking_append((1..=4).map(|i| entry(1, i)))
            .await
            .unwrap();
        log.blocking_append((5..=7).map(|i| entry(2, i)))
            .await
            .unwrap();
    });
    let records = |term: u64, range: std::ops::RangeInclusive<u64>| {
        let mut b = Vec::new();
        for i in range {
            segment::encode_record(&entry(term, i), &mut b).unwrap();
        }
        journal::Replay::Entries(b)
    };
    // The history that made the log: nothing to do.
    let history = vec![
        records(1, 1..=10),
        journal::Replay::Truncate(5),
        records(2, 5..=7),
    ];
    let n = LogStore::replay_journal(Arc::clone(&storage), &dir, history.clone()).unwrap();
    assert_eq!(n, 0);
    // The same, then records that do not follow on.
    let mut broken = history;
    broken.push(records(2, 20..=21));
    let e = LogStore::replay_journal(Arc::clone(&storage), &dir, broken).unwrap_err();
    assert!(e.to_string().contains("gap"), "{e}");
    let (mut log, _) = LogStore::open(Arc::clone(&storage), &dir, LogOptions::default()).unwrap();
    let got: Vec<LogId> = rt_block(log.try_get_log_entries(..))
        .unwrap()
        .iter()
        .map(|e| e.log_id)
        .collect();
    assert_eq!(got, held);
}

/// A log whose own sync fails stops the journal, and so every log of the
/// node: the failed segment's pages may be gone, and a retirement syncing
/// it by name would not hear of it and drop the only copy of its appends.
#[test]
fn a_failed_sync_of_one_log_stops_every_log_of_the_node() {
    let faulty = Arc::new(FaultyStorage::new(9));
    let storage: Arc<dyn Storage> = faulty.clone();
    let (journal, _) = Journal::open(Arc::clone(&storage), Path::new(BASE)).unwrap();
    let mut a = open_log(&storage, &journal, 1).unwrap();
    let mut b = open_log(&storage, &journal, 3).unwrap();
    rt().block_on(async {
        a.blocking_append((1..=3).map(|i| entry(1, i)))
            .await
            .unwrap();
        b.blocking_append((1..=3).map(|i| entry(1, i)))
            .await
            .unwrap();
        // A truncation syncs the segment first: that sync fails.
        faulty.fail_sync_at(1);
        assert!(a.truncate(log_id(1, 2)).await.is_err());
        let e = b.blocking_append([entry(1, 4)]).await.unwrap_err();
        assert!(e.to_string().contains("journal"), "{e}");
    });
}

/// A journal whose last file ends in a torn frame is opened after a crash
/// at any sync point of the open before: the file read (torn tail and
/// all) is removed before the next is begun, so it is never left as an
/// earlier file, where a bad frame is corruption.
#[test]
fn a_start_cut_short_leaves_a_journal_the_next_start_opens() {
    let mut point = 1;
    loop {
        let faulty = Arc::new(FaultyStorage::new(point));
        let storage: Arc<dyn Storage> = faulty.clone();
        let (journal, _) = Journal::open(Arc::clone(&storage), Path::new(BASE)).unwrap();
        let mut log = open_log(&storage, &journal, 1).unwrap();
        rt().block_on(log.blocking_append((1..=3).map(|i| entry(1, i))))
            .unwrap();
        drop((log, journal));
        let dir = Path::new(BASE).join(journal::JOURNAL_DIR);
        let name = storage.list(&dir).unwrap().pop().unwrap();
        let mut bytes = faulty.file(&dir.join(&name)).unwrap();
        let end = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
        bytes.truncate(end);
        // Half a frame: a write a crash cut short.
        bytes.extend_from_slice(&[40, 0, 0, 0, 7, 7, 7, 7, 1, 2]);
        faulty.put_file(&dir.join(&name), bytes);
        faulty.crash_at_sync(point);
        let crashed = Journal::open(Arc::clone(&storage), Path::new(BASE)).is_err();
        faulty.restart();
        let (journal, _) = Journal::open(Arc::clone(&storage), Path::new(BASE))
            .unwrap_or_else(|e| panic!("sync point {point}: {e}"));
        let mut log = open_log(&storage, &journal, 1).unwrap();
        let got = rt_block(log.try_get_log_entries(..)).unwrap();
        assert_eq!(got.len(), 3, "sync point {point}");
        if !crashed {
            break;
        }
        point += 1;
    }
    assert!(point > 3, "only {point} sync points");
}
