//! The queue of changes to the log's files, run in the order they were
//! asked for: by the I/O thread, or by a caller that runs it itself.

use std::collections::VecDeque;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use combkv::durable::{Storage, WritableFile};
use openraft::storage::LogFlushed;
use parking_lot::{Condvar, Mutex};
use tokio::sync::oneshot;

use super::SyncPolicy;
use super::journal::{self, Journal};
use super::segment::{self, COMMITTED_FILE, META_FILE, Meta, SYNCED_FILE, Synced};
use super::writer::Served;
use crate::types::{LogId, TypeConfig, Vote};

/// A segment file and where its entries' records start.
#[derive(Debug)]
pub(crate) struct Segment {
    pub first: u64,
    pub name: String,
    /// The bytes written to it (its records; zeros may follow).
    pub bytes: u64,
    /// (entry index, record offset), ascending.
    pub offsets: Vec<(u64, u64)>,
}

impl Segment {
    /// Where the records of the entries in `from..to` lie in this segment.
    fn span(&self, from: u64, to: u64) -> (u64, u64) {
        let at = |index: u64| {
            let i = self.offsets.partition_point(|&(e, _)| e < index);
            self.offsets.get(i).map_or(self.bytes, |&(_, o)| o)
        };
        (at(from), at(to))
    }
}

/// Where every written entry's record is: the segments, oldest first.
/// Only the I/O thread (or a caller running the queue) changes it; the
/// log's readers look entries up in it and read them without the lock.
#[derive(Debug, Default)]
pub(crate) struct Segments {
    /// Bumped whenever bytes a reader may have looked up are removed or may
    /// be overwritten (truncate, purge): a reader takes it before it looks
    /// at the log's state (which a truncation or purge changes before it
    /// is queued here) and checks, after reading, that it did not change
    /// meanwhile, or looks again.
    pub generation: u64,
    pub list: Vec<Segment>,
}

/// Where one entry's record is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Location {
    /// The segment's name.
    pub name: String,
    /// Where the record starts and where the next one does.
    pub from: u64,
    pub to: u64,
}

impl Segments {
    pub(crate) fn new(list: Vec<Segment>) -> Segments {
        Segments {
            generation: 0,
            list,
        }
    }

    /// Where the record of the entry at `index` is, if it was written.
    pub(crate) fn locate(&self, index: u64) -> Option<Location> {
        let s = self.list.partition_point(|s| s.first <= index);
        let seg = &self.list[s.checked_sub(1)?];
        let i = seg.offsets.partition_point(|&(e, _)| e < index);
        let &(e, from) = seg.offsets.get(i)?;
        if e != index {
            return None;
        }
        let to = seg.offsets.get(i + 1).map_or(seg.bytes, |&(_, o)| o);
        Some(Location {
            name: seg.name.clone(),
            from,
            to,
        })
    }

    /// The bytes of the records of the entries in `from..to` written so far.
    pub(crate) fn bytes_in(&self, from: u64, to: u64) -> u64 {
        self.list
            .iter()
            .map(|s| {
                let (a, b) = s.span(from, to);
                b - a
            })
            .sum()
    }
}

/// Told the number of each append written, and (index, offset in its
/// records) of its entries, once the records are in their segment (before
/// any sync): the log marks those entries readable from disk.
pub(crate) type Written = Box<dyn Fn(u64, &[(u64, usize)]) + Send>;

/// Work for the I/O thread.
pub(crate) enum Job {
    /// Records to write, (index, offset in `records`) of each, the
    /// append's number (see [`Written`]), and the callback to fire once
    /// they are synced.
    Append {
        records: Vec<u8>,
        indexes: Vec<(u64, usize)>,
        append: u64,
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
    /// Records the journal had and the segments lacked, written and synced
    /// (a replay, before the log is used).
    Rewrite {
        records: Vec<u8>,
        indexes: Vec<(u64, usize)>,
        done: oneshot::Sender<io::Result<()>>,
    },
}

/// The handle. Jobs queue in the order they are sent, and whoever holds
/// the files runs the queue in that order: the I/O thread, woken for each
/// job sent with [`IoThread::send`], or the caller of
/// [`IoThread::run_here`], which runs everything queued before its own job
/// and then its own, at once. The I/O thread is the log's own, or, for a
/// log of a node with a journal (every cluster node), the node's log
/// writer, shared by all of them (`writer`). Without a thread (`inline`,
/// for simulated clusters, whose clock must not run ahead of work on
/// another thread) every job runs in its caller.
#[derive(Debug)]
pub(crate) struct IoThread {
    shared: Arc<Shared>,
    runner: Runner,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// Who runs the jobs sent.
#[derive(Debug)]
enum Runner {
    /// The log's own thread.
    Own,
    /// The node's log writer, the journal's.
    Writer(Arc<Journal>),
    /// The caller.
    Inline,
}

#[derive(Debug)]
struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when a job is queued for the thread, or the log closes.
    queued: Condvar,
    /// Locked before `queue` where both are held.
    files: Mutex<Files>,
    /// On the node's log writer's ready list.
    ready: AtomicBool,
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

/// What the I/O thread starts from.
pub(crate) struct Start {
    pub storage: Arc<dyn Storage>,
    pub dir: PathBuf,
    pub segment_bytes: u64,
    pub sync: SyncPolicy,
    pub segments: Arc<Mutex<Segments>>,
    pub meta: Meta,
    /// What is synced now, and what the synced file says.
    pub synced: Option<Synced>,
    pub synced_saved: Option<Synced>,
    pub written: Written,
    pub inline: bool,
    /// Each fsync of a segment is timed into it.
    pub fsyncs: Arc<combkv::DurationHistogram>,
    /// Where appends are synced instead of the segment, with `Always`.
    pub journal: Option<Journaled>,
    /// The journal whose log writer runs the jobs (`Runner::Writer`),
    /// whatever the policy; none: a thread of the log's own.
    pub writer: Option<Arc<Journal>>,
}

/// A log's place in the node's journal.
#[derive(Debug)]
pub(crate) struct Journaled {
    pub journal: Arc<Journal>,
    pub key: String,
}

impl IoThread {
    pub(crate) fn start(start: Start) -> io::Result<IoThread> {
        let Start {
            storage,
            dir,
            segment_bytes,
            sync,
            segments,
            meta,
            synced,
            synced_saved,
            written,
            inline,
            fsyncs,
            journal,
            writer,
        } = start;
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
            synced,
            synced_saved,
            synced_saved_at: None,
            written,
            fsyncs,
            deferred: Vec::new(),
            deferred_ticket: 0,
            journal,
        };
        let runner = match writer {
            _ if inline => Runner::Inline,
            Some(j) => Runner::Writer(j),
            None => Runner::Own,
        };
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            queued: Condvar::new(),
            files: Mutex::new(files),
            ready: AtomicBool::new(false),
        });
        let thread = match &runner {
            Runner::Own => {
                let shared = Arc::clone(&shared);
                Some(
                    std::thread::Builder::new()
                        .name("raft-log-io".into())
                        .spawn(move || shared.serve())?,
                )
            }
            Runner::Writer(journal) => {
                let served: Arc<dyn Served> = Arc::clone(&shared) as Arc<dyn Served>;
                journal.writer().register(Arc::downgrade(&served))?;
                None
            }
            Runner::Inline => None,
        };
        Ok(IoThread {
            shared,
            runner,
            thread: Mutex::new(thread),
        })
    }

    /// Whether the log has an I/O thread of its own.
    #[cfg(test)]
    pub(crate) fn own_thread(&self) -> bool {
        self.thread.lock().is_some()
    }

    /// Queues `job` for the I/O thread (or runs it here, without one).
    pub(crate) fn send(&self, job: Job) -> io::Result<()> {
        self.push(job)?;
        match &self.runner {
            Runner::Own => {
                self.shared.queued.notify_one();
            }
            Runner::Writer(journal) => journal.writer().wake(&self.shared),
            Runner::Inline => self.shared.drain(),
        }
        Ok(())
    }

    /// Queues `job` without waking a busy I/O thread, which runs it with
    /// the next job it is woken for, or within [`COMMIT_SAVE_EVERY`] (work
    /// that may wait: saving the commit point, once per commit, would
    /// otherwise cost a thread wake each time); an idle thread of the
    /// log's own is woken (the node's log writer looks at every log that
    /// often anyway).
    pub(crate) fn send_quietly(&self, job: Job) -> io::Result<()> {
        let idle = self.push(job)?;
        match &self.runner {
            Runner::Own if idle => {
                self.shared.queued.notify_one();
            }
            Runner::Own | Runner::Writer(_) => {}
            Runner::Inline => self.shared.drain(),
        }
        Ok(())
    }

    /// Queues `job` and runs the queue in the caller, so that `job` is done
    /// (after everything sent before it) when this returns. A follower's
    /// appends to a log not synced in the journal go this way: it answers
    /// the leader only once they are synced, so handing them to a thread
    /// would add two thread switches to every round trip and save nothing.
    /// The caller blocks meanwhile (openraft's Raft task, which on a
    /// follower has nothing better to do than wait for the sync), also
    /// behind a job the thread is running.
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
        } else if matches!(self.runner, Runner::Writer(_)) {
            // The node's log writer leaves a closed log alone: what is
            // left is done here.
            self.shared.drain();
            self.shared.close_files();
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
                self.close_files();
                return;
            }
        }
    }

    /// What a closed log's files need once its last jobs ran: what is
    /// unsynced synced, the commit point and the synced file written.
    fn close_files(&self) {
        let mut files = self.files.lock();
        files.finish_deferred();
        if std::mem::take(&mut files.unsynced)
            && let Err(e) = files.sync()
        {
            tracing::error!("raft log: sync at close failed: {e}");
        }
        files.save_commit(true);
        files.save_synced(true);
    }

    /// Runs every queued job, in order, and what is due.
    fn drain(&self) {
        self.drain_with(false);
    }

    /// [`Shared::drain`]; with `defer`, appends synced in the journal are
    /// left waiting for its sync (`Files::deferred`). Whether any wait.
    fn drain_with(&self, defer: bool) -> bool {
        let mut files = self.files.lock();
        let mut more = || self.queue.lock().jobs.pop_front();
        let mut next = more();
        loop {
            // Also between jobs: under a steady stream the queue may not
            // run dry for a long time.
            files.tick();
            let Some(job) = next.take() else { break };
            next = files.run(job, &mut more, defer).or_else(&mut more);
        }
        if !defer {
            files.finish_deferred();
        }
        !files.deferred.is_empty()
    }
}

impl Served for Shared {
    fn ready_flag(&self) -> &AtomicBool {
        &self.ready
    }

    fn closed(&self) -> bool {
        self.queue.lock().closed
    }

    fn drain_deferred(&self) -> bool {
        self.drain_with(true)
    }

    fn flush_deferred(&self) {
        self.files.lock().finish_deferred();
    }
}

/// The files, and what is written but not yet synced or saved.
pub(crate) struct Files {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    segment_bytes: u64,
    sync: SyncPolicy,
    /// Written but not synced (with `EverySec`, or synced in the journal),
    /// and the last sync.
    unsynced: bool,
    synced_at: Instant,
    segments: Arc<Mutex<Segments>>,
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
    /// How much of the last segment is synced now, what the synced file
    /// says (the newest written, whether or not the write is durable), and
    /// when it was last written. Written lazily, like the commit point.
    synced: Option<Synced>,
    synced_saved: Option<Synced>,
    synced_saved_at: Option<Instant>,
    written: Written,
    fsyncs: Arc<combkv::DurationHistogram>,
    /// Appends whose records are queued in the journal, told once it has
    /// synced up to `deferred_ticket` (`Files::finish_deferred`), before any
    /// later append of this log or any other job of it runs.
    deferred: Vec<LogFlushed<TypeConfig>>,
    deferred_ticket: u64,
    journal: Option<Journaled>,
}

impl std::fmt::Debug for Files {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Files")
            .field("dir", &self.dir)
            .field("synced", &self.synced)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
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

/// How often `EverySec` syncs (and a journaled log its segment).
const EVERY_SEC: Duration = Duration::from_secs(1);

impl Files {
    /// Runs `job`; an append takes every append `more` has behind it into
    /// its sync (group commit), and with `defer` leaves them waiting for
    /// the journal's sync where they are synced there. Returns a job `more`
    /// gave that is not an append, to be run next.
    fn run(&mut self, job: Job, more: &mut dyn FnMut() -> Option<Job>, defer: bool) -> Option<Job> {
        let deferring = defer && self.sync == SyncPolicy::Always && self.journal.is_some();
        if !(deferring && matches!(job, Job::Append { .. })) {
            // Appends left waiting are told before anything after them.
            self.finish_deferred();
        }
        match job {
            Job::Append {
                records,
                indexes,
                append,
                callback,
            } => {
                let mut callbacks = vec![callback];
                let mut result = self.write(&records, &indexes, append);
                // Kept for the journal, which takes them once all are written.
                let mut written = vec![records];
                let mut leftover = None;
                while let Some(job) = more() {
                    match job {
                        Job::Append {
                            records,
                            indexes,
                            append,
                            callback,
                        } => {
                            if result.is_ok() {
                                result = self.write(&records, &indexes, append);
                            }
                            callbacks.push(callback);
                            written.push(records);
                        }
                        other => {
                            leftover = Some(other);
                            break;
                        }
                    }
                }
                if result.is_ok() && deferring {
                    // Durable once the journal's next turn is: the node's
                    // log writer takes it once every ready log is written.
                    self.unsynced = true;
                    match self.journal_enqueue(&written) {
                        Ok(ticket) => {
                            self.deferred_ticket = self.deferred_ticket.max(ticket);
                            self.deferred.extend(callbacks);
                            return leftover;
                        }
                        Err(e) => result = Err(e),
                    }
                }
                self.finish_deferred();
                if result.is_ok() {
                    result = match self.sync {
                        SyncPolicy::Always if self.journal.is_some() => {
                            // Durable in the journal; the segment is synced
                            // a second later (`tick`), so that what it
                            // records as synced keeps up and damage below
                            // that is told from a torn tail.
                            self.unsynced = true;
                            self.journal_entries(&written)
                        }
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
            Job::Rewrite {
                records,
                indexes,
                done,
            } => {
                let r = self.write(&records, &indexes, 0).and_then(|()| self.sync());
                let _ = done.send(r);
            }
        }
        None
    }

    /// Commits the records of appends just written to the journal (they
    /// are durable when it returns Ok), naming the segment they went to.
    fn journal_entries(&mut self, written: &[Vec<u8>]) -> io::Result<()> {
        let ticket = self.journal_enqueue(written)?;
        let r = match &self.journal {
            Some(j) => j.journal.wait(ticket),
            None => Ok(()),
        };
        self.guarded(|_| r)
    }

    /// Queues the records of appends just written in the journal, naming
    /// the segment they went to: the ticket to wait for (0, nothing to
    /// wait for, where there is nothing to queue).
    fn journal_enqueue(&mut self, written: &[Vec<u8>]) -> io::Result<u64> {
        let Some(j) = &self.journal else {
            return Ok(0);
        };
        let Some(name) = self.segments.lock().list.last().map(|s| s.name.clone()) else {
            return Ok(0);
        };
        let segment = self.dir.join(name);
        let records: Vec<&[u8]> = written
            .iter()
            .filter(|r| !r.is_empty())
            .map(Vec::as_slice)
            .collect();
        if records.is_empty() {
            return Ok(0);
        }
        let mut ticket = 0;
        let r = j
            .journal
            .enqueue(
                &j.key,
                journal::Op::Entries {
                    segment: &segment,
                    records: &records,
                },
            )
            .map(|t| ticket = t);
        self.guarded(|_| r)?;
        Ok(ticket)
    }

    /// Tells the appends left waiting (`deferred`) how the journal's sync
    /// of their records went, waiting for it first.
    fn finish_deferred(&mut self) {
        if self.deferred.is_empty() {
            return;
        }
        let ticket = std::mem::take(&mut self.deferred_ticket);
        let r = match &self.journal {
            Some(j) => j.journal.wait(ticket),
            None => Ok(()),
        };
        let r = self.guarded(|_| r);
        for cb in std::mem::take(&mut self.deferred) {
            cb.log_io_completed(match &r {
                Ok(()) => Ok(()),
                Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
            });
        }
    }

    /// How long the thread may wait for a job before something is due:
    /// an `EverySec` sync, or a commit point that waits. `None`: nothing is.
    fn idle_wait(&self) -> Option<Duration> {
        let sync = self
            .unsynced
            .then(|| EVERY_SEC.saturating_sub(self.synced_at.elapsed()));
        let due = |saved_at: Option<Instant>| {
            COMMIT_SAVE_EVERY.saturating_sub(saved_at.map_or(COMMIT_SAVE_EVERY, |t| t.elapsed()))
        };
        let commit = self.commit_pending.map(|_| due(self.commit_saved_at));
        let synced = (self.synced != self.synced_saved).then(|| due(self.synced_saved_at));
        [sync, commit, synced].into_iter().flatten().min()
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
        self.save_synced(false);
    }

    /// Writes how much of the last segment is synced, if that changed and
    /// the last write was long enough ago (or `now`). Not synced: a synced
    /// file that lags only leaves more of the segment to be taken for a
    /// torn tail after a crash, as before there was one.
    fn save_synced(&mut self, now: bool) {
        let due = now
            || self
                .synced_saved_at
                .is_none_or(|t| t.elapsed() >= COMMIT_SAVE_EVERY);
        if !due || self.synced == self.synced_saved {
            return;
        }
        self.synced_saved_at = Some(Instant::now());
        if segment::write_small(&*self.storage, &self.dir, SYNCED_FILE, &self.synced, false).is_ok()
        {
            self.synced_saved = self.synced;
        }
    }

    /// Notes that the last segment is synced up to what was written to it.
    fn note_synced(&mut self) {
        self.synced = self.segments.lock().list.last().map(|s| Synced {
            segment: s.first,
            bytes: s.bytes,
        });
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
            // The segment's state is unknown, and a retirement of the
            // journal syncing it by name would not hear of a failed sync
            // (see `Journal::fail`): the journal keeps every record.
            if let Some(j) = &self.journal {
                j.journal
                    .fail(&format!("the Raft log in {}: {e}", self.dir.display()));
            }
        }
        r
    }

    fn write(&mut self, records: &[u8], indexes: &[(u64, usize)], append: u64) -> io::Result<()> {
        self.guarded(|f| f.write_unguarded(records, indexes))?;
        // Located now: the log may serve them from the segment.
        (self.written)(append, indexes);
        Ok(())
    }

    fn write_unguarded(&mut self, records: &[u8], indexes: &[(u64, usize)]) -> io::Result<()> {
        let Some(&(first, _)) = indexes.first() else {
            return Ok(());
        };
        let full = self
            .segments
            .lock()
            .list
            .last()
            .is_some_and(|s| s.bytes >= self.segment_bytes);
        if self.open.is_none() || full {
            self.begin_segment(first)?;
        }
        let file = self.open.as_mut().expect("a segment is open");
        let start = self
            .segments
            .lock()
            .list
            .last()
            .expect("a segment is open")
            .bytes;
        let end = start + records.len() as u64;
        // Only where every append is synced here: elsewhere the zeroing's
        // own syncs would be more than the policy asks for (with the
        // journal, a segment is synced a second after its appends, and
        // when the journal retires the file that holds their copies).
        if self.sync == SyncPolicy::Always
            && self.journal.is_none()
            && end > self.zeroed
            && end <= self.segment_bytes
        {
            let to = (end + ZERO_AHEAD_BYTES).min(self.segment_bytes);
            file.zero_to(to)?;
            self.zeroed = to;
        }
        file.write_all(records)?;
        // Published only once written: a reader reads no byte before the
        // write that put it there returned (and never past `bytes`, where
        // the zeroing ahead goes on).
        let mut segments = self.segments.lock();
        let seg = segments.list.last_mut().expect("a segment is open");
        for &(index, at) in indexes {
            seg.offsets.push((index, start + at as u64));
        }
        seg.bytes = end;
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.synced_at = Instant::now();
        let r = self.guarded(|f| match f.open.as_mut() {
            Some(file) => {
                let r = file.sync_data();
                f.fsyncs.observe(f.synced_at.elapsed());
                r
            }
            None => Ok(()),
        });
        if r.is_ok() {
            self.note_synced();
        }
        r
    }

    /// Syncs the open segment and closes it, cut to its records: a closed
    /// segment keeps no zeroed space, so that the format stays the one
    /// builds before zeroing read (they would take a zero header in a
    /// segment other than the last for damage).
    fn close_segment(&mut self) -> io::Result<()> {
        let Some(mut old) = self.open.take() else {
            return Ok(());
        };
        let began = Instant::now();
        old.sync_data()?;
        self.fsyncs.observe(began.elapsed());
        drop(old);
        self.note_synced();
        let last = self
            .segments
            .lock()
            .list
            .last()
            .map(|s| (s.name.clone(), s.bytes));
        if let Some((name, bytes)) = last
            && self.zeroed > bytes
        {
            self.storage.truncate(&self.dir.join(name), bytes)?;
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
        // begun again, not listed twice (it has no entry a reader could
        // have looked up).
        {
            let mut segments = self.segments.lock();
            if segments.list.last().is_some_and(|s| s.name == name) {
                segments.list.pop();
            }
        }
        let file = self.storage.create(&self.dir.join(&name))?;
        self.storage.sync_dir(&self.dir)?;
        self.open = Some(file);
        self.zeroed = 0;
        self.segments.lock().list.push(Segment {
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
    ///
    /// The synced file is lowered first, durably, to what stays: it must
    /// never name bytes that are gone (after a crash they would read as
    /// damage to synced entries), nor a removed segment whose name a later
    /// append gives a new one.
    fn truncate(&mut self, since: u64) -> io::Result<()> {
        // Syncs the open segment: from here on every byte written is.
        self.close_segment()?;
        let (removed, cut, after) = {
            let segments = self.segments.lock();
            let list = &segments.list;
            let keep = list.partition_point(|s| s.first < since);
            let cut = list[..keep].last().and_then(|s| {
                let i = s.offsets.partition_point(|&(e, _)| e < since);
                s.offsets.get(i).map(|&(_, o)| (s.name.clone(), o))
            });
            let after = list[..keep].last().map(|s| Synced {
                segment: s.first,
                bytes: cut.as_ref().map_or(s.bytes, |c| c.1),
            });
            let removed: Vec<String> = list[keep..].iter().map(|s| s.name.clone()).collect();
            (removed, cut, after)
        };
        if removed.is_empty() && cut.is_none() {
            return Ok(());
        }
        // In the journal first: a replay of the appends it holds from
        // before this must not bring back what this removes.
        if let Some(j) = &self.journal {
            j.journal.commit(&j.key, journal::Op::Truncate(since))?;
        }
        if self.synced_saved != after {
            segment::write_small(&*self.storage, &self.dir, SYNCED_FILE, &after, true)?;
            self.synced_saved = after;
            self.synced_saved_at = Some(Instant::now());
        }
        {
            let mut segments = self.segments.lock();
            segments.generation += 1;
            let keep = segments.list.len() - removed.len();
            segments.list.truncate(keep);
            if let Some(s) = segments.list.last_mut() {
                let keep = s.offsets.partition_point(|&(i, _)| i < since);
                s.offsets.truncate(keep);
                if let Some((_, at)) = &cut {
                    s.bytes = *at;
                }
            }
        }
        for name in &removed {
            self.storage.remove(&self.dir.join(name))?;
        }
        self.storage.sync_dir(&self.dir)?;
        if let Some((name, at)) = &cut {
            self.storage.truncate(&self.dir.join(name), *at)?;
        }
        self.synced = after;
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
        let removed: Vec<String> = {
            let mut segments = self.segments.lock();
            let n = segments
                .list
                .iter()
                .skip(1)
                .take_while(|s| s.first <= upto.index + 1)
                .count();
            if n > 0 {
                segments.generation += 1;
            }
            segments.list.drain(..n).map(|s| s.name).collect()
        };
        for name in &removed {
            self.storage.remove(&self.dir.join(name))?;
        }
        self.storage.sync_dir(&self.dir)
    }

    fn write_meta(&mut self, meta: Meta) -> io::Result<()> {
        segment::write_small(&*self.storage, &self.dir, META_FILE, &meta, true)?;
        self.meta = meta;
        Ok(())
    }
}
