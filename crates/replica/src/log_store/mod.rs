//! The Raft log, which in cluster mode is combkv's write-ahead log.
//!
//! Entries live in segment files (`segment`); in memory the log keeps the
//! log id of each, where each record is, and a cache of recent entries
//! bounded in bytes (`memory`), so that a node's memory does not grow with
//! its log. Readers (openraft's replication tasks and apply) get cached
//! entries from memory and older ones from their segments, reading only
//! bytes already written, never the zeros the writer puts ahead of them; an
//! append is cached until it is written. Every change to the files joins one queue,
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
//! On open, a bad record in the last segment past what is known synced
//! (the `synced` file, saved lazily, see [`segment::Synced`]) is a torn
//! tail (a crash during an append that was never acknowledged) and is cut,
//! with any zeroed space after the records, and what stays is synced; a bad
//! record below it, or in any other segment, is corruption and the open
//! fails, naming the file and offset.

mod io_thread;
mod journal;
mod memory;
pub(crate) mod segment;
mod writer;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use combkv::durable::Storage;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{LogIdOptionExt, OptionalSend, RaftLogReader, StorageIOError};
use parking_lot::Mutex;

use crate::types::{Entry, LogId, NodeId, StorageError, TypeConfig, Vote};
use io_thread::{IoThread, Job, Journaled, Segments};
pub use journal::Journal;
use memory::{Cache, LogIds};
use segment::{COMMITTED_FILE, META_FILE, Meta, SYNCED_FILE, Synced};

/// A segment is closed and a new one begun once it holds this many bytes.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;

/// Recent entries kept in memory, in bytes (see [`LogOptions::cache_bytes`]).
pub const DEFAULT_CACHE_BYTES: u64 = 64 << 20;

/// What one `limited_get_log_entries` (an AppendEntries request to a
/// follower) returns at most, in record bytes, beyond its first entry: a
/// follower far behind is sent its entries a bounded piece at a time, not
/// openraft's 300 entries whatever their size.
const READ_BUDGET_BYTES: u64 = 8 << 20;

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
    /// When appends are synced (the server's `durability`).
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
    /// Written entries kept in memory, newest first, at most this many
    /// bytes (their records plus a little for each); older ones are read
    /// from their segments. Entries not yet written are kept whatever this
    /// says.
    pub cache_bytes: u64,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            sync: SyncPolicy::Always,
            inline: false,
            own_id: None,
            cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }
}

/// The log's in-memory state, shared with its readers. Locked after the
/// I/O thread's files where both are held (the thread marks entries
/// written), never the other way round.
#[derive(Debug)]
struct State {
    ids: LogIds,
    cache: Cache,
    /// The number of the newest append (see [`Cache::written`]).
    appends: u64,
    vote: Option<Vote>,
    committed: Option<LogId>,
    purged: Option<LogId>,
}

/// An entry of a read, as memory has it.
enum Slot {
    /// From the cache, with its record's bytes.
    Have(Entry, u64),
    /// To be read from a segment; the log id it must have.
    Disk(LogId),
}

/// The Raft log of one node, in a directory of its own.
#[derive(Debug, Clone)]
pub struct LogStore {
    state: Arc<Mutex<State>>,
    /// Where each written entry's record is (changed by the I/O thread).
    segments: Arc<Mutex<Segments>>,
    storage: Arc<dyn Storage>,
    io: Arc<IoThread>,
    dir: PathBuf,
    /// The commit point waiting to be saved, if a save job is queued.
    commit_to_save: CommitSlot,
    /// See [`LogOptions::own_id`].
    own_id: Option<NodeId>,
    /// How long each fsync of a segment took.
    fsyncs: Arc<combkv::DurationHistogram>,
    /// The node's journal, where this log's appends are synced.
    journal: Option<Arc<Journal>>,
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
        /// The segment file.
        file: String,
        /// Where in it the damage starts.
        offset: u64,
        /// What is wrong there.
        what: String,
    },
    /// The entries are not consecutive.
    Gap {
        /// The last index before the gap.
        after: u64,
        /// The index found next.
        next: u64,
    },
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Io(e) => write!(f, "reading the Raft log: {e}"),
            OpenError::Corrupt { file, offset, what } => {
                write!(
                    f,
                    "the Raft log is corrupt: {file} at byte {offset}: {what}"
                )
            }
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
        Self::open_journaled(storage, dir, options, None)
    }

    /// Opens (or creates) the log in `dir`, its appends synced through the
    /// node's `journal` where the policy is `Always` and the file work is
    /// threaded (see [`Journal`]); the journal was opened, and so replayed
    /// into this log, before.
    pub fn open_journaled(
        storage: Arc<dyn Storage>,
        dir: &Path,
        options: LogOptions,
        journal: Option<&Arc<Journal>>,
    ) -> Result<(LogStore, OpenReport), OpenError> {
        storage.create_dir_all(dir)?;
        // The node's log writer does the log's file work whatever the
        // policy (threaded logs only); its appends are synced in the
        // journal only with `Always`.
        let writer = journal.filter(|_| !options.inline).map(Arc::clone);
        let journal = journal
            .filter(|_| options.sync == SyncPolicy::Always && !options.inline)
            .map(|j| Journaled {
                journal: Arc::clone(j),
                key: j.key(dir),
            });
        let node_journal = journal.as_ref().map(|j| Arc::clone(&j.journal));
        let meta: Meta = segment::read_small(&*storage, dir, META_FILE)?.unwrap_or_default();
        // The commit point may lag or be lost; a damaged one is no loss.
        let committed: Option<LogId> =
            segment::read_small::<Option<LogId>>(&*storage, dir, COMMITTED_FILE)
                .ok()
                .flatten()
                .flatten();
        // A damaged synced file (a crash while it was replaced lazily) only
        // means knowing less: the last segment is then judged as before
        // there was one.
        let synced_saved: Option<Synced> =
            match segment::read_small::<Option<Synced>>(&*storage, dir, SYNCED_FILE) {
                Ok(s) => s.flatten(),
                Err(e) => {
                    tracing::warn!("raft log: {e}; its last segment is judged without it");
                    None
                }
            };
        let (ids, segments, report) =
            Self::load_segments(&*storage, dir, meta.purged, synced_saved)?;
        // A log with no segment holds no entry any journal record is of: a
        // new replica in this directory, or one whose entries were all
        // removed (durably). Records of the directory from before are not
        // this log's (see `journal`).
        if let Some(j) = &journal
            && segments.is_empty()
        {
            j.journal.commit(&j.key, journal::Op::Fresh)?;
        }
        // A commit point past what the log kept (entries not yet synced
        // when the node died) would have openraft re-apply entries that are
        // gone: keep it only where the log still holds that very entry.
        // And one below what was purged (saved without a sync, it can lag
        // the purge after a crash; a group made by a split starts purged
        // up to its seed with none saved) is raised to it: every purged
        // entry was committed, and openraft refuses to start on a purge
        // point past the commit point (seen in the ranges' simulation as a
        // panic of a split group restarted after a crash of every node).
        let committed = committed
            .filter(|c| Some(*c) <= meta.purged || ids.get(c.index) == Some(*c))
            .max(meta.purged);
        // Opening synced the last segment's records (see `load_segments`).
        let synced = segments.last().map(|s| Synced {
            segment: s.first,
            bytes: s.bytes,
        });
        let state = Arc::new(Mutex::new(State {
            ids,
            cache: Cache::new(options.cache_bytes),
            appends: 0,
            vote: meta.vote,
            committed,
            purged: meta.purged,
        }));
        let segments = Arc::new(Mutex::new(Segments::new(segments)));
        let written_state = Arc::clone(&state);
        let fsyncs = Arc::new(combkv::DurationHistogram::new());
        let io = IoThread::start(io_thread::Start {
            storage: Arc::clone(&storage),
            dir: dir.to_path_buf(),
            segment_bytes: options.segment_bytes,
            sync: options.sync,
            segments: Arc::clone(&segments),
            meta,
            synced,
            synced_saved,
            written: Box::new(move |append, indexes| {
                let mut state = written_state.lock();
                state.cache.written(append, indexes.iter().map(|&(i, _)| i));
            }),
            inline: options.inline,
            fsyncs: Arc::clone(&fsyncs),
            journal,
            writer,
        })?;
        let store = LogStore {
            state,
            segments,
            storage,
            io: Arc::new(io),
            dir: dir.to_path_buf(),
            commit_to_save: CommitSlot::default(),
            own_id: options.own_id,
            fsyncs,
            journal: node_journal,
        };
        Ok((store, report))
    }

    /// Reads every segment, cutting a torn tail, refusing corruption: the
    /// log ids of the entries after `purged`, and where each record is.
    fn load_segments(
        storage: &dyn Storage,
        dir: &Path,
        purged: Option<LogId>,
        synced: Option<Synced>,
    ) -> Result<(LogIds, Vec<io_thread::Segment>, OpenReport), OpenError> {
        let mut names: Vec<(u64, String)> = storage
            .list(dir)?
            .into_iter()
            .filter_map(|n| segment::segment_first(&n).map(|first| (first, n)))
            .collect();
        names.sort();
        let mut ids = LogIds::default();
        let mut segments = Vec::new();
        let mut report = OpenReport::default();
        let keep_from = purged.next_index();
        let mut prev: Option<u64> = purged.map(|p| p.index);
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
                    what: format!("{what}, and valid data follows"),
                });
            }
            if i == last {
                // Bytes known synced must all be valid records: damage
                // there (or records that end before them) is not a crash
                // during an append but lost entries this node may have
                // acknowledged to a leader.
                let synced_bytes = synced
                    .filter(|s| s.segment == *first)
                    .map_or(0, |s| s.bytes);
                if read.valid_bytes < synced_bytes {
                    let what = read.damage.as_deref().unwrap_or("the records end");
                    return Err(OpenError::Corrupt {
                        file: path.display().to_string(),
                        offset: read.valid_bytes,
                        what: format!(
                            "{what}, below the {synced_bytes} bytes synced (entries this node \
                             may have acknowledged)"
                        ),
                    });
                }
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
            for (offset, id) in read.entries {
                let index = id.index;
                offsets.push((index, offset));
                if index < keep_from {
                    continue;
                }
                // Entries follow each other without a gap or a repeat,
                // across segments too.
                if let Some(p) = prev
                    && index != p + 1
                {
                    return Err(OpenError::Gap {
                        after: p,
                        next: index,
                    });
                }
                prev = Some(index);
                ids.push(id);
            }
            segments.push(io_thread::Segment {
                first: *first,
                name: name.clone(),
                bytes: read.valid_bytes,
                offsets,
            });
        }
        if let Some(p) = purged {
            ids.purge(p.index);
        }
        report.entries = ids.len();
        Ok((ids, segments, report))
    }

    /// The directory of this log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes into the log in `dir` what the journal says was committed to
    /// it and its segments lack (see [`Journal`]): the entries replayed.
    fn replay_journal(
        storage: Arc<dyn Storage>,
        dir: &Path,
        ops: Vec<journal::Replay>,
    ) -> Result<u64, OpenError> {
        // Inline: the replay's file work is done when each job returns.
        let options = LogOptions {
            inline: true,
            ..LogOptions::default()
        };
        let (log, _) = Self::open(storage, dir, options)?;
        let replayed = log.replay(ops).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("replaying the journal into {}: {e}", dir.display()),
            )
        })?;
        Ok(replayed)
    }

    /// Applies a journal's records in order: an entry the log holds with
    /// the same log id is kept; one it holds with another, and all after
    /// it, are replaced; a truncation is done again. The outcome is worked
    /// out in memory first and checked (no gap), then made with at most one
    /// truncation and one write, synced before this returns: a replay
    /// stopped part-way never leaves entries the records removed back on
    /// disk, nor acknowledged ones missing that were there before it.
    fn replay(&self, ops: Vec<journal::Replay>) -> io::Result<u64> {
        let state = self.state.lock();
        let purged = state.purged.map(|p| p.index);
        // From `cut` on, the outcome is `tail` (log id, the op's bytes and
        // the record's range in them); below it, what the log holds.
        let mut cut: Option<u64> = None;
        let mut tail: BTreeMap<u64, (LogId, usize, std::ops::Range<usize>)> = BTreeMap::new();
        let mut bytes: Vec<Vec<u8>> = Vec::new();
        for op in ops {
            match op {
                journal::Replay::Truncate(since) => {
                    cut = Some(cut.map_or(since, |c| c.min(since)));
                    tail.split_off(&since);
                }
                journal::Replay::Entries(b) => {
                    let n = bytes.len();
                    for (range, id) in segment::split_records(&b)? {
                        if Some(id.index) <= purged {
                            continue;
                        }
                        let now = match (tail.get(&id.index), cut) {
                            (Some(t), _) => Some(t.0),
                            (None, Some(c)) if id.index >= c => None,
                            (None, _) => state.ids.get(id.index),
                        };
                        if now == Some(id) {
                            continue;
                        }
                        cut = Some(cut.map_or(id.index, |c| c.min(id.index)));
                        tail.split_off(&id.index);
                        tail.insert(id.index, (id, n, range));
                    }
                    bytes.push(b);
                }
            }
        }
        let Some(cut) = cut else { return Ok(0) };
        // The first index where the outcome differs from the log.
        let held_end = state.ids.last().map_or(0, |l| l.index + 1);
        let first = (cut..held_end.max(tail.keys().next_back().map_or(0, |l| l + 1)))
            .find(|&i| state.ids.get(i) != tail.get(&i).map(|t| t.0));
        let Some(first) = first else { return Ok(0) };
        // What the log keeps below `first`, then the outcome's entries from
        // it: they must follow on without a gap.
        let kept_below = first
            .checked_sub(1)
            .is_some_and(|i| state.ids.get(i).is_some());
        let mut next = if kept_below {
            Some(first)
        } else if let Some(l) = state.ids.last().filter(|l| l.index < first) {
            Some(l.index + 1)
        } else {
            // Nothing kept: after what was purged (anything, where
            // nothing was).
            purged.map(|p| p + 1)
        };
        let mut records = Vec::new();
        let mut indexes = Vec::new();
        let mut ids = Vec::new();
        for (&index, (id, n, range)) in tail.range(first..) {
            if let Some(x) = next
                && x != index
            {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("entry {index} would follow entry {}, leaving a gap", x - 1),
                ));
            }
            next = Some(index + 1);
            indexes.push((index, records.len()));
            records.extend_from_slice(&bytes[*n][range.clone()]);
            ids.push(*id);
        }
        drop(state);
        if held_end > first {
            self.replay_truncate(first)?;
        }
        {
            // In step with the files, as every write keeps it.
            let mut state = self.state.lock();
            for id in &ids {
                state.ids.push(*id);
            }
        }
        self.rewrite(records, indexes)?;
        Ok(ids.len() as u64)
    }

    /// Writes and syncs replayed records (the log's file work is inline:
    /// done when `run_here` returns).
    fn rewrite(&self, records: Vec<u8>, indexes: Vec<(u64, usize)>) -> io::Result<()> {
        if indexes.is_empty() {
            return Ok(());
        }
        let (done, mut rx) = tokio::sync::oneshot::channel();
        self.io.run_here(Job::Rewrite {
            records,
            indexes,
            done,
        })?;
        rx.try_recv()
            .map_err(|_| io::Error::other("the replay's write was not run"))?
    }

    /// Removes every entry from `since` on (a replay's one cut), durably.
    fn replay_truncate(&self, since: u64) -> io::Result<()> {
        {
            let mut state = self.state.lock();
            state.ids.truncate(since);
            state.cache.truncate(since);
        }
        let (done, mut rx) = tokio::sync::oneshot::channel();
        self.io.run_here(Job::Truncate { since, done })?;
        rx.try_recv()
            .map_err(|_| io::Error::other("the replay's truncation was not run"))?
    }

    /// How long each fsync of a segment took (appends and closing
    /// segments; none with `SyncPolicy::None`); where the appends are
    /// synced in the node's journal, each of its syncs (every log's).
    pub fn fsync_durations(&self) -> combkv::HistogramSnapshot {
        match &self.journal {
            Some(j) => j.fsync_durations(),
            None => self.fsyncs.snapshot(),
        }
    }

    /// The newest commit point openraft reported.
    pub fn committed(&self) -> Option<LogId> {
        self.state.lock().committed
    }

    /// The bytes of the records of the entries in `from..to` written so far
    /// (what a snapshot at `to - 1` would let the log purge).
    pub fn bytes_in(&self, from: u64, to: u64) -> u64 {
        self.segments.lock().bytes_in(from, to)
    }

    /// (entries, bytes) the cache holds now (tests, the figures).
    pub fn cached(&self) -> (usize, u64) {
        let state = self.state.lock();
        (state.cache.len(), state.cache.bytes())
    }

    /// The entries of `start..end` the log holds, as it stands when this is
    /// called: cached ones from memory, the others read from their
    /// segments. Past the first, entries stop once their records exceed
    /// `budget` bytes.
    fn read(&self, start: u64, end: u64, budget: u64) -> io::Result<Vec<Entry>> {
        loop {
            // Taken before the entries are looked up: a purge or a
            // truncation that removes a record between the look-up in
            // memory and the one in the segments (an entry evicted from
            // the cache, then purged) changes it, and the read starts over.
            let generation = self.segments.lock().generation;
            let mut slots = self.in_memory(start, end, budget);
            if !slots.iter().any(|s| matches!(s, Slot::Disk(_))) {
                return Ok(slots
                    .into_iter()
                    .filter_map(|s| match s {
                        Slot::Have(e, _) => Some(e),
                        Slot::Disk(_) => None,
                    })
                    .collect());
            }
            #[cfg(test)]
            BETWEEN_LOOKS.with_borrow_mut(|f| {
                if let Some(f) = f {
                    f();
                }
            });
            let located = self.locate(&mut slots, budget);
            let read = match &located {
                Ok(runs) => self.read_runs(runs),
                Err(id) => Err(format!("entry {id} is neither in memory nor in a segment")),
            };
            // A truncation or purge since the look-up in memory may have
            // removed or replaced what was read: look again.
            if self.segments.lock().generation != generation {
                continue;
            }
            let read = read.map_err(|why| {
                io::Error::other(format!("the Raft log in {}: {why}", self.dir.display()))
            })?;
            let mut read = read.into_iter();
            return Ok(slots
                .into_iter()
                .map(|s| match s {
                    Slot::Have(e, _) => e,
                    Slot::Disk(_) => read.next().expect("one read per entry on disk"),
                })
                .collect());
        }
    }

    /// The entries `start..end` as memory has them, up to `budget` bytes:
    /// cached ones, and the log ids of those to read from the segments.
    fn in_memory(&self, start: u64, end: u64, budget: u64) -> Vec<Slot> {
        let mut slots = Vec::new();
        let mut bytes = 0u64;
        let state = self.state.lock();
        let from = start.max(state.purged.next_index());
        let to = end.min(state.ids.end());
        for i in from..to {
            if bytes > budget {
                break;
            }
            if let Some((e, n)) = state.cache.get(i) {
                bytes += n;
                slots.push(Slot::Have(e.clone(), n));
            } else if let Some(id) = state.ids.get(i) {
                slots.push(Slot::Disk(id));
            }
        }
        slots
    }

    /// Where the entries to read from the segments are: runs of records
    /// next to each other in one segment, each read at once. `slots` is cut
    /// where `budget` bytes are passed. Err: an entry no segment holds.
    fn locate(
        &self,
        slots: &mut Vec<Slot>,
        budget: u64,
    ) -> Result<Vec<(io_thread::Location, Vec<LogId>)>, LogId> {
        let mut runs: Vec<(io_thread::Location, Vec<LogId>)> = Vec::new();
        let segments = self.segments.lock();
        let mut bytes = 0u64;
        let mut kept = 0;
        for s in slots.iter() {
            if bytes > budget && kept > 0 {
                break;
            }
            kept += 1;
            let id = match s {
                Slot::Have(_, n) => {
                    bytes += n;
                    continue;
                }
                Slot::Disk(id) => *id,
            };
            let at = segments.locate(id.index).ok_or(id)?;
            bytes += at.to - at.from;
            match runs.last_mut() {
                Some((run, ids)) if run.name == at.name && run.to == at.from => {
                    run.to = at.to;
                    ids.push(id);
                }
                _ => runs.push((at, vec![id])),
            }
        }
        slots.truncate(kept);
        Ok(runs)
    }

    /// Reads located runs of records, checking each holds the entries
    /// expected there. Err: why not.
    fn read_runs(&self, runs: &[(io_thread::Location, Vec<LogId>)]) -> Result<Vec<Entry>, String> {
        let mut read = Vec::new();
        for (at, ids) in runs {
            let got =
                segment::read_records(&*self.storage, &self.dir.join(&at.name), at.from, at.to)
                    .map_err(|e| e.to_string())?;
            if got.len() != ids.len() || !got.iter().zip(ids).all(|((_, e), id)| e.log_id == *id) {
                return Err(format!(
                    "{} bytes {}..{} do not hold the entries {}..={} written there",
                    at.name,
                    at.from,
                    at.to,
                    ids[0],
                    ids[ids.len() - 1]
                ));
            }
            read.extend(got.into_iter().map(|(_, e)| e));
        }
        Ok(read)
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
        let start = match range.start_bound() {
            Bound::Included(&i) => i,
            Bound::Excluded(&i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&i) => i.saturating_add(1),
            Bound::Excluded(&i) => i,
            Bound::Unbounded => u64::MAX,
        };
        self.read(start, end, u64::MAX)
            .map_err(|e| StorageIOError::read_logs(&e).into())
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, StorageError> {
        self.read(start, end, READ_BUDGET_BYTES)
            .map_err(|e| StorageIOError::read_logs(&e).into())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let state = self.state.lock();
        Ok(LogState {
            last_purged_log_id: state.purged,
            last_log_id: state.ids.last().or(state.purged),
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
        state.appends += 1;
        let append = state.appends;
        // An entry at an index the log holds replaces it and all after it
        // (openraft truncates first; this keeps the files in step if not).
        let mut replaces = None;
        for e in entries {
            led_here |= Some(e.log_id.leader_id.node_id) == self.own_id;
            if e.log_id.index < state.ids.end() {
                state.cache.truncate(e.log_id.index);
                replaces.get_or_insert(e.log_id.index);
            }
            let at = records.len();
            segment::encode_record(&e, &mut records).map_err(Self::io_error)?;
            indexes.push((e.log_id.index, at));
            state.ids.push(e.log_id);
            // Cached until written: readable now, as openraft expects.
            state.cache.insert(e, records.len() - at, append);
        }
        drop(state);
        if let Some(since) = replaces {
            self.io
                .send_quietly(Job::Truncate {
                    since,
                    done: tokio::sync::oneshot::channel().0,
                })
                .map_err(Self::io_error)?;
        }
        // Flushed when the callback is called.
        let job = Job::Append {
            records,
            indexes,
            append,
            callback,
        };
        // A follower's appends run here, unless the log is journaled: the
        // node's log writer then syncs them with every other log's, which
        // on a node of many ranges (most of whose appends are a
        // follower's) paid far more than the thread hop costs (`docs/
        // experiments.md`, "One log writer per node").
        let sent = if self.own_id.is_some() && !led_here && self.journal.is_none() {
            self.io.run_here(job)
        } else {
            self.io.send(job)
        };
        sent.map_err(Self::io_error)
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        {
            let mut state = self.state.lock();
            state.ids.truncate(log_id.index);
            state.cache.truncate(log_id.index);
        }
        let since = log_id.index;
        self.run(|done| Job::Truncate { since, done })
            .await
            .map_err(Self::io_error)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        {
            let mut state = self.state.lock();
            state.ids.purge(log_id.index);
            state.cache.purge(log_id.index);
            state.purged = Some(log_id);
        }
        self.run(|done| Job::Purge { upto: log_id, done })
            .await
            .map_err(|e| StorageError::from(StorageIOError::write_logs(&e)))
    }
}

#[cfg(test)]
thread_local! {
    /// Run by [`LogStore::read`], on the thread reading, between its look at
    /// the state and its look-up in the segments of the entries not cached:
    /// a test lands a truncation or a purge there.
    static BETWEEN_LOOKS: std::cell::RefCell<Option<Box<dyn FnMut()>>> =
        const { std::cell::RefCell::new(None) };
}

#[cfg(test)]
mod tests;
