//! The queue of changes to the log's files, run in the order they were
//! asked for: by the I/O thread, or by a caller that runs it itself.

use std::collections::VecDeque;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use combkv::durable::{Storage, WritableFile};
use openraft::storage::LogFlushed;
use parking_lot::{Condvar, Mutex};
use tokio::sync::oneshot;

use super::SyncPolicy;
use super::segment::{self, COMMITTED_FILE, META_FILE, Meta};
use crate::types::{LogId, TypeConfig, Vote};

/// A segment file and where its entries' records start.
#[derive(Debug)]
pub(crate) struct Segment {
    pub first: u64,
    pub name: String,
    pub bytes: u64,
    /// (entry index, record offset), ascending.
    pub offsets: Vec<(u64, u64)>,
}

/// Work for the I/O thread.
pub(crate) enum Job {
    /// Records to write, (index, offset in `records`) of each, and the
    /// callback to fire once they are synced.
    Append {
        records: Vec<u8>,
        indexes: Vec<(u64, usize)>,
        callback: LogFlushed<TypeConfig>,
    },
    SaveVote {
        vote: Vote,
        done: oneshot::Sender<io::Result<()>>,
    },
    /// Saves the newest commit point the slot holds (see
    /// `LogStore::save_committed`).
    SaveCommitted { slot: super::CommitSlot },
    /// Remove every entry from `since` on.
    Truncate {
        since: u64,
        done: oneshot::Sender<io::Result<()>>,
    },
    /// Remove every entry up to `upto`.
    Purge {
        upto: LogId,
        done: oneshot::Sender<io::Result<()>>,
    },
}

/// The handle. Jobs queue in the order they are sent, and whoever holds
/// the files runs the queue in that order: the I/O thread, woken for each
/// job sent with [`IoThread::send`], or the caller of
/// [`IoThread::run_here`], which runs everything queued before its own job
/// and then its own, at once. Without a thread (`inline`, for simulated
/// clusters, whose clock must not run ahead of work on another thread)
/// every job runs in its caller.
#[derive(Debug)]
pub(crate) struct IoThread {
    shared: Arc<Shared>,
    threaded: bool,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

#[derive(Debug)]
struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when a job is queued for the thread, or the log closes.
    queued: Condvar,
    /// Locked before `queue` where both are held.
    files: Mutex<Files>,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    closed: bool,
    /// The thread waits with nothing due: a quiet job must wake it.
    idle: bool,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("jobs", &self.jobs.len())
            .field("closed", &self.closed)
            .finish()
    }
}

impl IoThread {
    pub(crate) fn start(
        storage: Arc<dyn Storage>,
        dir: PathBuf,
        segment_bytes: u64,
        sync: SyncPolicy,
        segments: Vec<Segment>,
        meta: Meta,
        inline: bool,
    ) -> io::Result<IoThread> {
        let files = Files {
            storage,
            dir,
            segment_bytes,
            sync,
            unsynced: false,
            synced_at: Instant::now(),
            segments,
            open: None,
            zeroed: 0,
            meta,
            failed: None,
            commit_pending: None,
            commit_saved_at: None,
        };
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            queued: Condvar::new(),
            files: Mutex::new(files),
        });
        let thread = if inline {
            None
        } else {
            let shared = Arc::clone(&shared);
            Some(
                std::thread::Builder::new()
                    .name("raft-log-io".into())
                    .spawn(move || shared.serve())?,
            )
        };
        Ok(IoThread {
            shared,
            threaded: thread.is_some(),
            thread: Mutex::new(thread),
        })
    }

    /// Queues `job` for the I/O thread (or runs it here, without one).
    pub(crate) fn send(&self, job: Job) -> io::Result<()> {
        self.push(job)?;
        if self.threaded {
            self.shared.queued.notify_one();
        } else {
            self.shared.drain();
        }
        Ok(())
    }

    /// Queues `job` without waking a busy I/O thread, which runs it with
    /// the next job it is woken for, or within [`COMMIT_SAVE_EVERY`] (work
    /// that may wait: saving the commit point, once per commit, would
    /// otherwise cost a thread wake each time); an idle thread is woken.
    pub(crate) fn send_quietly(&self, job: Job) -> io::Result<()> {
        let idle = self.push(job)?;
        if !self.threaded {
            self.shared.drain();
        } else if idle {
            self.shared.queued.notify_one();
        }
        Ok(())
    }

    /// Queues `job` and runs the queue in the caller, so that `job` is done
    /// (after everything sent before it) when this returns. A follower's
    /// appends go this way: it answers the leader only once they are
    /// synced, so handing them to the thread would add two thread switches
    /// to every round trip and save nothing. The caller blocks meanwhile
    /// (openraft's Raft task, which on a follower has nothing better to do
    /// than wait for the sync), also behind a job the thread is running.
    pub(crate) fn run_here(&self, job: Job) -> io::Result<()> {
        self.push(job)?;
        self.shared.drain();
        Ok(())
    }

    /// Queues `job`; says whether the thread waits with nothing due.
    fn push(&self, job: Job) -> io::Result<bool> {
        let mut queue = self.shared.queue.lock();
        if queue.closed {
            return Err(io::Error::other("the Raft log is closed"));
        }
        queue.jobs.push_back(job);
        Ok(queue.idle)
    }
}

impl Drop for IoThread {
    fn drop(&mut self) {
        self.shared.queue.lock().closed = true;
        self.shared.queued.notify_one();
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }
}

impl Shared {
    /// The I/O thread: runs queued jobs as they come (and quiet ones at
    /// least every [`COMMIT_SAVE_EVERY`]); meanwhile syncs what `EverySec`
    /// left unsynced and writes a commit point that waits. Once the log
    /// closes it runs what is left, syncs and writes the commit point. Once
    /// the log closes it runs what is left and writes the commit point.
    fn serve(&self) {
        loop {
            let wait = self.files.lock().idle_wait();
            let closed = {
                let mut queue = self.queue.lock();
                if queue.jobs.is_empty() && !queue.closed {
                    match wait {
                        Some(d) => {
                            self.queued.wait_for(&mut queue, d);
                        }
                        None => {
                            queue.idle = true;
                            self.queued.wait(&mut queue);
                            queue.idle = false;
                        }
                    }
                }
                queue.closed
            };
            self.drain();
            if closed {
                let mut files = self.files.lock();
                if std::mem::take(&mut files.unsynced)
                    && let Err(e) = files.sync()
                {
                    tracing::error!("raft log: sync at close failed: {e}");
                }
                files.save_commit(true);
                return;
            }
        }
    }

    /// Runs every queued job, in order, and what is due.
    fn drain(&self) {
        let mut files = self.files.lock();
        let mut more = || self.queue.lock().jobs.pop_front();
        let mut next = more();
        loop {
            // Also between jobs: under a steady stream the queue may not
            // run dry for a long time.
            files.tick();
            let Some(job) = next.take() else { break };
            next = files.run(job, &mut more).or_else(&mut more);
        }
    }
}

/// The files, and what is written but not yet synced or saved.
#[derive(Debug)]
pub(crate) struct Files {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    segment_bytes: u64,
    sync: SyncPolicy,
    /// Written but not synced (with `EverySec`), and the last sync.
    unsynced: bool,
    synced_at: Instant,
    segments: Vec<Segment>,
    /// The segment being appended to (the last of `segments`), and how far
    /// it is zeroed.
    open: Option<Box<dyn WritableFile>>,
    zeroed: u64,
    meta: Meta,
    /// After a failed write or sync, nothing more is written: the state of
    /// the file is unknown, and openraft stops the node on the error.
    failed: Option<String>,
    /// A commit point not yet written, and when the last one was.
    commit_pending: Option<Option<LogId>>,
    commit_saved_at: Option<Instant>,
}

/// A commit point is written at most this often. Each write is a small
/// file created and renamed; once per entry it cost the leader a tenth of
/// its time. A commit point that lags after a crash only means applying a
/// little more of the log at the next start.
const COMMIT_SAVE_EVERY: Duration = Duration::from_millis(100);

/// A segment is zeroed this far ahead of its appends (up to where it
/// closes), so that appends overwrite allocated space: a sync after an
/// append that grew the file writes the file's size too, which on ext4
/// made each sync about half again as long (`docs/experiments.md`,
/// "Cluster"). One zeroing (a write and a sync) per this many bytes: 1
/// MiB takes about 1 ms here, 4 MiB 12 ms (a stall the appends queued
/// behind it would feel in their latency).
const ZERO_AHEAD_BYTES: u64 = 1 << 20;

/// How often `EverySec` syncs.
const EVERY_SEC: Duration = Duration::from_secs(1);

impl Files {
    /// Runs `job`; an append takes every append `more` has behind it into
    /// its sync (group commit). Returns a job `more` gave that is not an
    /// append, to be run next.
    fn run(&mut self, job: Job, more: &mut dyn FnMut() -> Option<Job>) -> Option<Job> {
        match job {
            Job::Append {
                records,
                indexes,
                callback,
            } => {
                let mut callbacks = vec![callback];
                let mut result = self.write(&records, &indexes);
                let mut leftover = None;
                while let Some(job) = more() {
                    match job {
                        Job::Append {
                            records,
                            indexes,
                            callback,
                        } => {
                            if result.is_ok() {
                                result = self.write(&records, &indexes);
                            }
                            callbacks.push(callback);
                        }
                        other => {
                            leftover = Some(other);
                            break;
                        }
                    }
                }
                if result.is_ok() {
                    result = match self.sync {
                        SyncPolicy::Always => self.sync(),
                        SyncPolicy::EverySec => {
                            self.unsynced = true;
                            Ok(())
                        }
                        SyncPolicy::None => Ok(()),
                    };
                }
                for cb in callbacks {
                    cb.log_io_completed(match &result {
                        Ok(()) => Ok(()),
                        Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
                    });
                }
                return leftover;
            }
            Job::SaveVote { vote, done } => {
                let mut meta = self.meta.clone();
                meta.vote = Some(vote);
                let r = self.write_meta(meta);
                let _ = done.send(r);
            }
            Job::SaveCommitted { slot } => {
                self.commit_pending = Some(slot.lock().take()?);
                self.save_commit(false);
            }
            Job::Truncate { since, done } => {
                let _ = done.send(self.guarded(|f| f.truncate(since)));
            }
            Job::Purge { upto, done } => {
                let _ = done.send(self.guarded(|f| f.purge(upto)));
            }
        }
        None
    }

    /// How long the thread may wait for a job before something is due:
    /// an `EverySec` sync, or a commit point that waits. `None`: nothing is.
    fn idle_wait(&self) -> Option<Duration> {
        let sync = self
            .unsynced
            .then(|| EVERY_SEC.saturating_sub(self.synced_at.elapsed()));
        let commit = self.commit_pending.map(|_| {
            COMMIT_SAVE_EVERY.saturating_sub(
                self.commit_saved_at
                    .map_or(COMMIT_SAVE_EVERY, |t| t.elapsed()),
            )
        });
        match (sync, commit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Does what is due: with `EverySec`, a sync a second after the last
    /// (also while appends keep coming), and a waiting commit point.
    fn tick(&mut self) {
        if self.unsynced && self.synced_at.elapsed() >= EVERY_SEC {
            self.unsynced = false;
            if let Err(e) = self.sync() {
                tracing::error!("raft log: sync failed: {e}");
            }
        }
        self.save_commit(false);
    }

    /// Writes the pending commit point if the last was written long enough
    /// ago (or `now`).
    fn save_commit(&mut self, now: bool) {
        let due = now
            || self
                .commit_saved_at
                .is_none_or(|t| t.elapsed() >= COMMIT_SAVE_EVERY);
        if !due {
            return;
        }
        let Some(committed) = self.commit_pending.take() else {
            return;
        };
        self.commit_saved_at = Some(Instant::now());
        let _ = segment::write_small(&*self.storage, &self.dir, COMMITTED_FILE, &committed, false);
    }

    /// Runs a file change unless an earlier one failed; a failure stops
    /// every later change.
    fn guarded(&mut self, f: impl FnOnce(&mut Files) -> io::Result<()>) -> io::Result<()> {
        if let Some(why) = &self.failed {
            return Err(io::Error::other(format!(
                "the Raft log failed earlier: {why}"
            )));
        }
        let r = f(self);
        if let Err(e) = &r {
            self.failed = Some(e.to_string());
        }
        r
    }

    fn write(&mut self, records: &[u8], indexes: &[(u64, usize)]) -> io::Result<()> {
        self.guarded(|f| f.write_unguarded(records, indexes))
    }

    fn write_unguarded(&mut self, records: &[u8], indexes: &[(u64, usize)]) -> io::Result<()> {
        let Some(&(first, _)) = indexes.first() else {
            return Ok(());
        };
        let full = self
            .segments
            .last()
            .is_some_and(|s| s.bytes >= self.segment_bytes);
        if self.open.is_none() || full {
            self.begin_segment(first)?;
        }
        let seg = self.segments.last_mut().expect("a segment is open");
        let file = self.open.as_mut().expect("a segment is open");
        let end = seg.bytes + records.len() as u64;
        // Only where every append is synced: elsewhere the zeroing's own
        // syncs would be more than the policy asks for.
        if self.sync == SyncPolicy::Always && end > self.zeroed && end <= self.segment_bytes {
            let to = (end + ZERO_AHEAD_BYTES).min(self.segment_bytes);
            file.zero_to(to)?;
            self.zeroed = to;
        }
        file.write_all(records)?;
        for &(index, at) in indexes {
            seg.offsets.push((index, seg.bytes + at as u64));
        }
        seg.bytes += records.len() as u64;
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.synced_at = Instant::now();
        self.guarded(|f| match f.open.as_mut() {
            Some(file) => file.sync_data(),
            None => Ok(()),
        })
    }

    /// Syncs the open segment and closes it, cut to its records: a closed
    /// segment keeps no zeroed space, so that the format stays the one
    /// builds before zeroing read (they would take a zero header in a
    /// segment other than the last for damage).
    fn close_segment(&mut self) -> io::Result<()> {
        let Some(mut old) = self.open.take() else {
            return Ok(());
        };
        old.sync_data()?;
        drop(old);
        if let Some(seg) = self.segments.last()
            && self.zeroed > seg.bytes
        {
            self.storage
                .truncate(&self.dir.join(&seg.name), seg.bytes)?;
        }
        self.zeroed = 0;
        Ok(())
    }

    /// Starts a new segment whose first entry is `first`. Its directory
    /// entry is synced before anything is acknowledged from it.
    fn begin_segment(&mut self, first: u64) -> io::Result<()> {
        self.close_segment()?;
        let name = segment::segment_name(first);
        // An empty segment left by a torn tail at its very start is
        // begun again, not listed twice.
        if self.segments.last().is_some_and(|s| s.name == name) {
            self.segments.pop();
        }
        let file = self.storage.create(&self.dir.join(&name))?;
        self.storage.sync_dir(&self.dir)?;
        self.open = Some(file);
        self.zeroed = 0;
        self.segments.push(Segment {
            first,
            name,
            bytes: 0,
            offsets: Vec::new(),
        });
        Ok(())
    }

    /// Removes the entries from `since` on: whole segments that begin at or
    /// after it, then the tail of the segment that holds it. Appends after
    /// this go to a new segment.
    fn truncate(&mut self, since: u64) -> io::Result<()> {
        self.close_segment()?;
        while self.segments.last().is_some_and(|s| s.first >= since) {
            let s = self.segments.pop().expect("checked");
            self.storage.remove(&self.dir.join(&s.name))?;
        }
        self.storage.sync_dir(&self.dir)?;
        if let Some(s) = self.segments.last_mut() {
            let keep = s.offsets.partition_point(|&(i, _)| i < since);
            if keep < s.offsets.len() {
                let cut = s.offsets[keep].1;
                s.offsets.truncate(keep);
                s.bytes = cut;
                self.storage.truncate(&self.dir.join(&s.name), cut)?;
            }
        }
        Ok(())
    }

    /// Records the purge point durably, then removes the segments every
    /// entry of which it covers.
    fn purge(&mut self, upto: LogId) -> io::Result<()> {
        let mut meta = self.meta.clone();
        meta.purged = Some(upto);
        self.write_meta(meta)?;
        // A segment is covered once the next one begins at or before the
        // entry after `upto`; the last segment always stays.
        while self.segments.len() > 1 && self.segments[1].first <= upto.index + 1 {
            let s = self.segments.remove(0);
            self.storage.remove(&self.dir.join(&s.name))?;
        }
        self.storage.sync_dir(&self.dir)
    }

    fn write_meta(&mut self, meta: Meta) -> io::Result<()> {
        segment::write_small(&*self.storage, &self.dir, META_FILE, &meta, true)?;
        self.meta = meta;
        Ok(())
    }
}
