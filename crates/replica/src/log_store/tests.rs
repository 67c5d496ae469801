//! The log's own behaviour: reopening, torn tails against corruption,
//! truncation and purging, and crashes at every sync point.

use std::io;
use std::path::Path;
use std::sync::Arc;

use combkv::durable::{FaultyStorage, FsStorage, Storage};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, EntryPayload, RaftLogReader};

use super::*;
use crate::types::{Batch, Entry, LogId};

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn entry(term: u64, index: u64) -> Entry {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(Batch {
            now_ms: index,
            ops: vec![index as u8; (index % 7) as usize],
        }),
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn open(
    storage: &Arc<dyn Storage>,
    segment_bytes: u64,
) -> Result<(LogStore, OpenReport), OpenError> {
    open_as(storage, segment_bytes, None)
}

/// Opens the log of node `own_id`: the test's entries are led by node 1,
/// so with `Some(2)` every append runs in the caller (a follower's), with
/// `Some(1)` or `None` on the I/O thread.
fn open_as(
    storage: &Arc<dyn Storage>,
    segment_bytes: u64,
    own_id: Option<NodeId>,
) -> Result<(LogStore, OpenReport), OpenError> {
    LogStore::open(
        Arc::clone(storage),
        Path::new("/raft"),
        LogOptions {
            segment_bytes,
            own_id,
            ..LogOptions::default()
        },
    )
}

async fn indexes(log: &mut LogStore) -> Vec<u64> {
    log.try_get_log_entries(..)
        .await
        .unwrap()
        .iter()
        .map(|e| e.log_id.index)
        .collect()
}

#[test]
fn entries_vote_and_purge_point_survive_a_reopen() {
    let storage: Arc<dyn Storage> = Arc::new(FaultyStorage::new(1));
    rt().block_on(async {
        let (mut log, _) = open(&storage, 200).unwrap();
        log.blocking_append((1..=30).map(|i| entry(1, i)))
            .await
            .unwrap();
        let vote = openraft::Vote::new(3, 2);
        log.save_vote(&vote).await.unwrap();
        log.purge(log_id(1, 10)).await.unwrap();
        log.truncate(log_id(1, 26)).await.unwrap();
        log.blocking_append((26..=28).map(|i| entry(2, i)))
            .await
            .unwrap();
        log.save_committed(Some(log_id(2, 27))).await.unwrap();
        // Jobs run in order: once this vote is saved, so is the commit point.
        log.save_vote(&vote).await.unwrap();
        drop(log);
        let (mut log, report) = open(&storage, 200).unwrap();
        assert_eq!(log.read_committed().await.unwrap(), Some(log_id(2, 27)));
        assert_eq!(report.torn_tail, None);
        assert_eq!(indexes(&mut log).await, (11..=28).collect::<Vec<_>>());
        let got = log.try_get_log_entries(26..27).await.unwrap();
        assert_eq!(got, vec![entry(2, 26)]);
        assert_eq!(log.read_vote().await.unwrap(), Some(vote));
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(log_id(1, 10)));
        assert_eq!(state.last_log_id, Some(log_id(2, 28)));
        // A commit point naming an entry the log no longer holds (written
        // but never synced before a crash) is dropped, not trusted.
        log.save_committed(Some(log_id(3, 40))).await.unwrap();
        log.save_vote(&vote).await.unwrap();
        drop(log);
        let (mut log, _) = open(&storage, 200).unwrap();
        assert_eq!(log.read_committed().await.unwrap(), None);
    });
}

#[test]
fn a_torn_tail_is_cut_and_corruption_refuses_to_open() {
    let storage = Arc::new(FaultyStorage::new(2));
    let dynamic: Arc<dyn Storage> = storage.clone();
    let path = Path::new("/raft").join(segment::segment_name(1));
    rt().block_on(async {
        let (mut log, _) = open(&dynamic, 1 << 20).unwrap();
        log.blocking_append((1..=10).map(|i| entry(1, i)))
            .await
            .unwrap();
    });
    let whole = storage.file(&path).unwrap();
    // Closing the log recorded every record as synced; these cases are
    // crashes before that record was written (see
    // `damage_below_what_was_synced_is_corruption_above_it_a_torn_tail`).
    let synced = Path::new("/raft").join(segment::SYNCED_FILE);
    assert!(storage.file(&synced).is_some());
    dynamic.remove(&synced).unwrap();
    // The records, then the zeros the writer put ahead of them.
    let records = segment::read_segment(&*dynamic, &path).unwrap().valid_bytes as usize;
    assert!(whole.len() > records && whole[records..].iter().all(|&b| b == 0));
    // A half-written last record, at the end of the file or with the
    // zeros after it: cut, and the nine before it kept.
    let mut torn_in_zeros = whole.clone();
    torn_in_zeros[records - 3..records].fill(0);
    for torn in [whole[..records - 3].to_vec(), torn_in_zeros] {
        storage.put_file(&path, torn);
        let (mut log, report) = open(&dynamic, 1 << 20).unwrap();
        assert!(report.torn_tail.is_some());
        assert_eq!(
            rt().block_on(indexes(&mut log)),
            (1..=9).collect::<Vec<_>>()
        );
        drop(log);
        // Opening synced what it kept, and closing recorded that.
        dynamic.remove(&synced).unwrap();
    }
    // A zero header with data after it, in a segment other than the last:
    // corruption, not the end of the records.
    let first_record = 8 + u32::from_le_bytes(whole[..4].try_into().unwrap()) as usize;
    let mut holed = whole.clone();
    holed[first_record..first_record + 8].fill(0);
    storage.put_file(&path, holed);
    let second = Path::new("/raft").join(segment::segment_name(11));
    storage.put_file(&second, Vec::new());
    match open(&dynamic, 1 << 20) {
        Err(OpenError::Corrupt { offset, what, .. }) => {
            assert_eq!(offset as usize, first_record);
            assert!(what.contains("zero record header"), "{what}");
        }
        other => panic!("opened a corrupt log: {other:?}"),
    }
    storage.remove(&second).unwrap();
    // In the last segment the same hole is a torn tail (a crash may leave
    // later blocks of an unsynced write without earlier ones): cut there.
    let mut holed = whole.clone();
    holed[first_record..first_record + 8].fill(0);
    storage.put_file(&path, holed);
    let (mut log, report) = open(&dynamic, 1 << 20).unwrap();
    assert!(report.torn_tail.is_some());
    assert_eq!(rt().block_on(indexes(&mut log)), vec![1]);
    drop(log);
    dynamic.remove(&synced).unwrap();
    // A flipped byte in the first record, valid records after it.
    let mut bad = whole.clone();
    bad[segment::RECORD_HEADER_BYTES + 1] ^= 0x40;
    storage.put_file(&path, bad);
    let second = Path::new("/raft").join(segment::segment_name(11));
    storage.put_file(&second, Vec::new());
    match open(&dynamic, 1 << 20) {
        Err(OpenError::Corrupt { file, offset, .. }) => {
            assert!(file.contains("seg-00000000000000000001"), "{file}");
            assert_eq!(offset, 0);
        }
        other => panic!("opened a corrupt log: {other:?}"),
    }
}

#[test]
fn segments_roll_over_and_purged_ones_are_removed() {
    let storage = Arc::new(FaultyStorage::new(3));
    let dynamic: Arc<dyn Storage> = storage.clone();
    rt().block_on(async {
        let (mut log, _) = open(&dynamic, 64).unwrap();
        for i in 1..=40 {
            log.blocking_append([entry(1, i)]).await.unwrap();
        }
        let names = |s: &Arc<dyn Storage>| {
            s.list(Path::new("/raft"))
                .unwrap()
                .into_iter()
                .filter(|n| n.starts_with("seg-"))
                .count()
        };
        let before = names(&dynamic);
        assert!(before > 3, "{before} segments");
        // Closed segments are cut to their records (builds that predate
        // zeroing read them); the open one has zeroed space after its own.
        let zeros = |s: &Arc<dyn Storage>| -> Vec<u64> {
            let mut segs: Vec<String> = s.list(Path::new("/raft")).unwrap();
            segs.retain(|n| n.starts_with("seg-"));
            segs.iter()
                .map(|n| {
                    let path = Path::new("/raft").join(n);
                    s.len(&path).unwrap() - segment::read_segment(&**s, &path).unwrap().valid_bytes
                })
                .collect()
        };
        let z = zeros(&dynamic);
        assert!(z[..z.len() - 1].iter().all(|&n| n == 0), "{z:?}");
        assert!(z[z.len() - 1] > 0, "{z:?}");
        log.purge(log_id(1, 35)).await.unwrap();
        assert!(names(&dynamic) < before);
        drop(log);
        let (mut log, _) = open(&dynamic, 64).unwrap();
        assert_eq!(indexes(&mut log).await, (36..=40).collect::<Vec<_>>());
        // Opening cut the last one's zeros as well.
        assert!(zeros(&dynamic).iter().all(|&n| n == 0));
    });
}

/// Crashes at every sync point of a run of appends, votes, truncations and
/// purges: whatever the crash, the reopened log opens (what it records as
/// synced never names bytes that are gone), holds every entry whose append
/// was reported flushed, the last vote whose save returned, and no gap.
#[test]
fn a_crash_at_every_sync_point_keeps_what_was_flushed() {
    // A leader's appends (on the I/O thread) and a follower's (in the
    // caller, between the thread's jobs).
    for own_id in [Some(1), Some(2)] {
        crash_at_every_sync_point(own_id);
    }
}

fn crash_at_every_sync_point(own_id: Option<NodeId>) {
    let mut point = 1;
    loop {
        let storage = Arc::new(FaultyStorage::new(point));
        let dynamic: Arc<dyn Storage> = storage.clone();
        storage.crash_at_sync(point);
        let (flushed, vote) = rt().block_on(async {
            let (mut log, _) = match open_as(&dynamic, 96, own_id) {
                Ok(l) => l,
                Err(_) => return (0, None),
            };
            let mut flushed = 0;
            let mut vote = None;
            for round in 1..=6u64 {
                let from = flushed + 1;
                let batch: Vec<_> = (from..from + 3).map(|i| entry(round, i)).collect();
                if log.blocking_append(batch).await.is_err() {
                    break;
                }
                flushed = from + 2;
                let v = openraft::Vote::new(round, 1);
                if log.save_vote(&v).await.is_err() {
                    break;
                }
                vote = Some(v);
                if round == 3 && log.purge(log_id(3, 4)).await.is_err() {
                    break;
                }
                // A truncation into the last segment (it lowers what is
                // recorded as synced) and appends after it.
                if round == 4 {
                    if log.truncate(log_id(4, flushed - 1)).await.is_err() {
                        break;
                    }
                    flushed -= 2;
                }
            }
            (flushed, vote)
        });
        let crashed = storage.has_crashed();
        storage.restart();
        let (mut log, _) =
            open_as(&dynamic, 96, own_id).unwrap_or_else(|e| panic!("sync point {point}: {e}"));
        let got = rt().block_on(indexes(&mut log));
        let first = got.first().copied().unwrap_or(1);
        assert!(
            got.last().copied().unwrap_or(0) >= flushed,
            "sync point {point}: flushed up to {flushed}, reopened {got:?}"
        );
        assert_eq!(
            got,
            (first..first + got.len() as u64).collect::<Vec<_>>(),
            "sync point {point}: a gap"
        );
        let read = rt().block_on(log.read_vote()).unwrap();
        assert!(read >= vote, "sync point {point}: vote {read:?} < {vote:?}");
        if !crashed {
            break;
        }
        point += 1;
    }
    assert!(point > 10, "only {point} sync points");
}

/// With `EverySec`, appends that keep coming are still synced once a
/// second (the I/O thread had synced only after a second without any).
#[test]
fn every_sec_syncs_while_appends_keep_coming() {
    let storage = Arc::new(FaultyStorage::new(7));
    let dynamic: Arc<dyn Storage> = storage.clone();
    let appended = rt().block_on(async {
        let (mut log, _) = LogStore::open(
            Arc::clone(&dynamic),
            Path::new("/raft"),
            LogOptions {
                sync: SyncPolicy::EverySec,
                ..LogOptions::default()
            },
        )
        .unwrap();
        log.blocking_append([entry(1, 1)]).await.unwrap();
        let syncs = storage.syncs();
        let start = std::time::Instant::now();
        let mut index = 1;
        while start.elapsed() < std::time::Duration::from_millis(1500) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            index += 1;
            log.blocking_append([entry(1, index)]).await.unwrap();
        }
        // The thread checks what is due after each job it ran; give it the
        // time to run the last one.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(
            storage.syncs() > syncs,
            "no sync in {index} appends over 1.5 s"
        );
        index
    });
    storage.crash();
    storage.restart();
    let (mut log, _) = open(&dynamic, DEFAULT_SEGMENT_BYTES).unwrap();
    let got = rt().block_on(indexes(&mut log));
    assert!(got.len() > 1, "kept {} of {appended} entries", got.len());
}

#[test]
fn the_real_file_system_works_too() {
    let dir = std::env::temp_dir().join(format!("combkv-raft-log-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let storage: Arc<dyn Storage> = Arc::new(FsStorage);
    rt().block_on(async {
        let (mut log, _) =
            LogStore::open(Arc::clone(&storage), &dir, LogOptions::default()).unwrap();
        log.blocking_append((1..=5).map(|i| entry(1, i)))
            .await
            .unwrap();
        drop(log);
        let (mut log, _) =
            LogStore::open(Arc::clone(&storage), &dir, LogOptions::default()).unwrap();
        assert_eq!(indexes(&mut log).await, vec![1, 2, 3, 4, 5]);
    });
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An entry whose payload (`len` bytes) follows from its log id, so that
/// any entry read back can be checked on its own.
fn sized(term: u64, index: u64, len: usize) -> Entry {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(Batch {
            now_ms: index,
            ops: (0..len as u64)
                .map(|i| (i ^ index ^ term.rotate_left(3)) as u8)
                .collect(),
        }),
    }
}

/// True if `e` is what [`sized`] makes for its log id.
fn whole(e: &Entry) -> bool {
    let EntryPayload::Normal(b) = &e.payload else {
        return false;
    };
    *e == sized(e.log_id.leader_id.term, e.log_id.index, b.ops.len())
}

fn open_with(
    storage: &Arc<dyn Storage>,
    segment_bytes: u64,
    cache_bytes: u64,
    own_id: Option<NodeId>,
) -> LogStore {
    LogStore::open(
        Arc::clone(storage),
        Path::new("/raft"),
        LogOptions {
            segment_bytes,
            cache_bytes,
            own_id,
            ..LogOptions::default()
        },
    )
    .unwrap()
    .0
}

/// A file system whose writes wait while its gate is shut, so that a test
/// can hold appends unwritten for as long as it looks at them.
#[derive(Debug, Clone)]
struct Gated {
    inner: FaultyStorage,
    shut: Arc<(parking_lot::Mutex<bool>, parking_lot::Condvar)>,
}

#[derive(Debug)]
struct GatedFile {
    inner: Box<dyn combkv::durable::WritableFile>,
    shut: Arc<(parking_lot::Mutex<bool>, parking_lot::Condvar)>,
}

impl Gated {
    fn set(&self, shut: bool) {
        *self.shut.0.lock() = shut;
        self.shut.1.notify_all();
    }
}

impl combkv::durable::WritableFile for GatedFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut shut = self.shut.0.lock();
        while *shut {
            self.shut.1.wait(&mut shut);
        }
        drop(shut);
        self.inner.write_all(buf)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn zero_to(&mut self, len: u64) -> io::Result<()> {
        self.inner.zero_to(len)
    }
}

impl Storage for Gated {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<combkv::durable::FileNames> {
        self.inner.list(dir)
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn combkv::durable::WritableFile>> {
        Ok(Box::new(GatedFile {
            inner: self.inner.create(path)?,
            shut: Arc::clone(&self.shut),
        }))
    }
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn std::io::Read + Send>> {
        self.inner.open_read(path)
    }
    fn read_at(&self, path: &Path, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_at(path, offset, buf)
    }
    fn len(&self, path: &Path) -> io::Result<u64> {
        self.inner.len(path)
    }
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        self.inner.truncate(path, len)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.inner.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }
}

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
        let reader = {
            let shared = Arc::clone(&shared);
            let stop = Arc::clone(&stop);
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
        };
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
/// point the same damage is a torn tail and is cut. A truncation lowers the
/// record first, so that a segment it removed and an append began again
/// under the same name is not judged by the old one's synced bytes. The
/// old log cut any damage in its last segment as a torn tail.
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
    // Truncated to nothing and begun again under the same name with
    // shorter records, at once: the record of the old segment's synced
    // bytes (saved lazily after its first append) must not condemn the new
    // one after a crash. The lazy save of the lowered record waits out its
    // interval; the truncation lowers it durably itself. (A crash keeps a
    // random part of the lazily written file, so several seeds.)
    drop(log);
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
