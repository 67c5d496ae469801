//! The Raft log, which in cluster mode is combkv's write-ahead log.
//!
//! Entries live in memory (for the replication tasks that read them) and
//! in segment files (`segment`). Every change to the files joins one queue,
//! in the order openraft asked for it, and the queue is run in that order,
//! so no write overtakes an earlier one: by the I/O thread, or, for a
//! follower's appends, by the caller, which runs what is queued before its
//! own at once (see [`LogOptions::own_id`]). Appends are group-committed:
//! the thread writes every append queued behind the first, syncs once, and
//! only then reports each of them flushed, never before. The vote is
//! written to a temporary file, synced, renamed into place and the
//! directory synced before `save_vote` returns. Entries are purged (their
//! segments removed) only once openraft says a snapshot covers them, that
//! is after the snapshot is durable.
//!
//! On open, a bad record in the last segment is a torn tail (a crash during
//! an append that was never acknowledged) and is cut, with any zeroed space
//! after the records, and what stays is synced; a bad record in any other
//! segment is corruption and the open fails, naming the file and offset.

mod io_thread;
pub(crate) mod segment;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use combkv::durable::Storage;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{LogIdOptionExt, OptionalSend, RaftLogReader, StorageIOError};
use parking_lot::Mutex;

use crate::types::{Entry, LogId, NodeId, StorageError, TypeConfig, Vote};
use io_thread::{IoThread, Job};
use segment::{COMMITTED_FILE, META_FILE, Meta};

/// A segment is closed and a new one begun once it holds this many bytes.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;

/// When appended entries are synced (the server's durability mode). The
/// vote and the purge point are always synced before they count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// Before openraft hears they are flushed: an entry counts toward a
    /// quorum only once it is durable here.
    Always,
    /// Once a second; appends are reported flushed when written. A crash of
    /// a majority loses up to about a second of acknowledged writes.
    EverySec,
    /// Never (the operating system writes them out in its own time).
    None,
}

/// How a log is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogOptions {
    /// A segment is closed once it holds this many bytes.
    pub segment_bytes: u64,
    pub sync: SyncPolicy,
    /// Do file work in the caller instead of the I/O thread (simulated
    /// clusters, whose paused clock must not run ahead of another thread).
    pub inline: bool,
    /// This node's id. Entries another node leads (a follower's appends)
    /// are written and synced in the caller: the follower answers the
    /// leader only once they are durable, so a hop to the I/O thread and
    /// back would only lengthen every round trip. A leader's own appends go
    /// to the thread and are synced while they are sent to the followers.
    /// `None`: every append goes to the thread.
    pub own_id: Option<NodeId>,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            sync: SyncPolicy::Always,
            inline: false,
            own_id: None,
        }
    }
}

/// The log's in-memory state, shared with its readers.
#[derive(Debug, Default)]
struct State {
    entries: BTreeMap<u64, Entry>,
    vote: Option<Vote>,
    committed: Option<LogId>,
    purged: Option<LogId>,
}

/// The Raft log of one node, in a directory of its own.
#[derive(Debug, Clone)]
pub struct LogStore {
    state: Arc<Mutex<State>>,
    io: Arc<IoThread>,
    dir: PathBuf,
    /// The commit point waiting to be saved, if a save job is queued.
    commit_to_save: CommitSlot,
    /// See [`LogOptions::own_id`].
    own_id: Option<NodeId>,
}

/// See [`LogStore::save_committed`].
pub(crate) type CommitSlot = Arc<Mutex<Option<Option<LogId>>>>;

/// What opening a log found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// Entries loaded (after the purged prefix).
    pub entries: usize,
    /// A torn tail cut from the last segment: (file, offset, bytes dropped).
    pub torn_tail: Option<(String, u64, u64)>,
}

/// Why a log could not be opened.
#[derive(Debug)]
#[non_exhaustive]
pub enum OpenError {
    /// Reading or repairing the files failed.
    Io(io::Error),
    /// A segment is damaged where valid data follows: cutting it would lose
    /// entries this node may have acknowledged.
    Corrupt {
        file: String,
        offset: u64,
        what: String,
    },
    /// The entries are not consecutive.
    Gap { after: u64, next: u64 },
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Io(e) => write!(f, "reading the Raft log: {e}"),
            OpenError::Corrupt { file, offset, what } => write!(
                f,
                "the Raft log is corrupt: {file} at byte {offset}: {what}, and valid data follows"
            ),
            OpenError::Gap { after, next } => {
                write!(f, "the Raft log has a gap: entry {next} follows {after}")
            }
        }
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OpenError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for OpenError {
    fn from(e: io::Error) -> Self {
        OpenError::Io(e)
    }
}

impl LogStore {
    /// Opens (or creates) the log in `dir`.
    pub fn open(
        storage: Arc<dyn Storage>,
        dir: &Path,
        options: LogOptions,
    ) -> Result<(LogStore, OpenReport), OpenError> {
        storage.create_dir_all(dir)?;
        let meta: Meta = segment::read_small(&*storage, dir, META_FILE)?.unwrap_or_default();
        // The commit point may lag or be lost; a damaged one is no loss.
        let committed: Option<LogId> =
            segment::read_small::<Option<LogId>>(&*storage, dir, COMMITTED_FILE)
                .ok()
                .flatten()
                .flatten();
        let (entries, segments, report) = Self::load_segments(&*storage, dir, meta.purged)?;
        // A commit point past what the log kept (entries not yet synced
        // when the node died) would have openraft re-apply entries that are
        // gone: keep it only where the log still holds that very entry.
        let committed = committed.filter(|c| {
            Some(*c) <= meta.purged || entries.get(&c.index).is_some_and(|e| e.log_id == *c)
        });
        let state = State {
            entries,
            vote: meta.vote,
            committed,
            purged: meta.purged,
        };
        let io = IoThread::start(
            Arc::clone(&storage),
            dir.to_path_buf(),
            options.segment_bytes,
            options.sync,
            segments,
            meta,
            options.inline,
        )?;
        let store = LogStore {
            state: Arc::new(Mutex::new(state)),
            io: Arc::new(io),
            dir: dir.to_path_buf(),
            commit_to_save: CommitSlot::default(),
            own_id: options.own_id,
        };
        Ok((store, report))
    }

    /// Reads every segment, cutting a torn tail, refusing corruption.
    #[expect(clippy::type_complexity, reason = "one private loader's results")]
    fn load_segments(
        storage: &dyn Storage,
        dir: &Path,
        purged: Option<LogId>,
    ) -> Result<(BTreeMap<u64, Entry>, Vec<io_thread::Segment>, OpenReport), OpenError> {
        let mut names: Vec<(u64, String)> = storage
            .list(dir)?
            .into_iter()
            .filter_map(|n| segment::segment_first(&n).map(|first| (first, n)))
            .collect();
        names.sort();
        let mut entries = BTreeMap::new();
        let mut segments = Vec::new();
        let mut report = OpenReport::default();
        let last = names.len().saturating_sub(1);
        for (i, (first, name)) in names.iter().enumerate() {
            let path = dir.join(name);
            let read = segment::read_segment(storage, &path)?;
            if let Some(what) = &read.damage
                && i != last
            {
                return Err(OpenError::Corrupt {
                    file: path.display().to_string(),
                    offset: read.valid_bytes,
                    what: what.clone(),
                });
            }
            if i == last {
                // Cut what follows the records (a torn tail: written, never
                // synced, so never acknowledged; or zeroed space) and sync
                // the rest: after a crash of the process alone, records
                // written but not synced are still read from the page
                // cache, and must be durable before this node tells a
                // leader it holds them.
                storage.truncate(&path, read.valid_bytes)?;
            }
            if let Some(what) = &read.damage {
                tracing::debug!("raft log: {}: {what}", path.display());
                report.torn_tail = Some((
                    path.display().to_string(),
                    read.valid_bytes,
                    read.file_bytes - read.valid_bytes,
                ));
            }
            let mut offsets = Vec::with_capacity(read.entries.len());
            for (offset, e) in read.entries {
                offsets.push((e.log_id.index, offset));
                entries.insert(e.log_id.index, e);
            }
            segments.push(io_thread::Segment {
                first: *first,
                name: name.clone(),
                bytes: read.valid_bytes,
                offsets,
            });
        }
        let keep_from = purged.next_index();
        entries.retain(|&i, _| i >= keep_from);
        let mut prev: Option<u64> = purged.map(|p| p.index);
        for &i in entries.keys() {
            if let Some(p) = prev
                && i != p + 1
            {
                return Err(OpenError::Gap { after: p, next: i });
            }
            prev = Some(i);
        }
        report.entries = entries.len();
        Ok((entries, segments, report))
    }

    /// The directory of this log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The newest commit point openraft reported.
    pub fn committed(&self) -> Option<LogId> {
        self.state.lock().committed
    }

    fn io_error(e: io::Error) -> StorageError {
        StorageIOError::write_logs(&e).into()
    }

    /// Runs `job` on the I/O thread and waits for it (from async code,
    /// without blocking the runtime's worker).
    async fn run(
        &self,
        job: impl FnOnce(tokio::sync::oneshot::Sender<io::Result<()>>) -> Job,
    ) -> io::Result<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.io.send(job(tx))?;
        rx.await
            .map_err(|_| io::Error::other("the Raft log's I/O thread stopped"))?
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let state = self.state.lock();
        Ok(state.entries.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let state = self.state.lock();
        let last = state
            .entries
            .last_key_value()
            .map(|(_, e)| e.log_id)
            .or(state.purged);
        Ok(LogState {
            last_purged_log_id: state.purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let vote = *vote;
        self.run(|done| Job::SaveVote { vote, done })
            .await
            .map_err(|e| StorageError::from(StorageIOError::write_vote(&e)))?;
        self.state.lock().vote = Some(vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.state.lock().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.state.lock().committed = committed;
        // Not synced and not waited for: a commit point that lags after a
        // crash only means re-applying a little more of the log at the next
        // start. Each save is a file written and renamed in the appends'
        // queue, so saves that pile up behind appends are coalesced: one
        // job is queued at a time and writes the newest point; and it does
        // not wake a busy I/O thread: the next append's runner runs it.
        let mut slot = self.commit_to_save.lock();
        let queued = slot.is_some();
        *slot = Some(committed);
        drop(slot);
        if !queued {
            let slot = Arc::clone(&self.commit_to_save);
            let _ = self.io.send_quietly(Job::SaveCommitted { slot });
        }
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.state.lock().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut records = Vec::new();
        let mut indexes = Vec::new();
        let mut led_here = false;
        let mut state = self.state.lock();
        for e in entries {
            led_here |= Some(e.log_id.leader_id.node_id) == self.own_id;
            let at = records.len();
            segment::encode_record(&e, &mut records).map_err(Self::io_error)?;
            indexes.push((e.log_id.index, at));
            state.entries.insert(e.log_id.index, e);
        }
        drop(state);
        // Readable now; flushed when the callback is called.
        let job = Job::Append {
            records,
            indexes,
            callback,
        };
        let sent = if self.own_id.is_some() && !led_here {
            self.io.run_here(job)
        } else {
            self.io.send(job)
        };
        sent.map_err(Self::io_error)
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.state.lock().entries.split_off(&log_id.index);
        let since = log_id.index;
        self.run(|done| Job::Truncate { since, done })
            .await
            .map_err(Self::io_error)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        {
            let mut state = self.state.lock();
            let keep = state.entries.split_off(&(log_id.index + 1));
            state.entries = keep;
            state.purged = Some(log_id);
        }
        self.run(|done| Job::Purge { upto: log_id, done })
            .await
            .map_err(|e| StorageError::from(StorageIOError::write_logs(&e)))
    }
}

#[cfg(test)]
mod tests;
