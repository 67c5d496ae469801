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
        // but never synced before a crash) is dropped, not trusted: the
        // purge point stands for it (every purged entry was committed, and
        // openraft will not start on a purge point past the commit point).
        log.save_committed(Some(log_id(3, 40))).await.unwrap();
        log.save_vote(&vote).await.unwrap();
        drop(log);
        let (mut log, _) = open(&storage, 200).unwrap();
        assert_eq!(log.read_committed().await.unwrap(), Some(log_id(1, 10)));
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
    fn sync_file(&self, path: &Path) -> io::Result<()> {
        self.inner.sync_file(path)
    }
}

mod cache;
mod journal;
mod model;
