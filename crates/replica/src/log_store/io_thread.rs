//! The one thread that changes the log's files, in the order it is asked.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};

use combkv::durable::{Storage, WritableFile};
use openraft::storage::LogFlushed;
use parking_lot::Mutex;
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

/// The handle: sends jobs to the thread (which ends when the handle is
/// dropped), or runs them at once in the caller (`inline`, for simulated
/// clusters, whose clock must not run ahead of work on another thread).
#[derive(Debug)]
pub(crate) enum IoThread {
    Thread {
        tx: Mutex<Option<Sender<Job>>>,
        thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    },
    Inline(Mutex<Files>),
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
        let mut files = Files {
            storage,
            dir,
            segment_bytes,
            sync,
            unsynced: false,
            segments,
            open: None,
            meta,
            failed: None,
            commit_pending: None,
            commit_saved_at: None,
        };
        if inline {
            return Ok(IoThread::Inline(Mutex::new(files)));
        }
        let (tx, rx) = channel();
        let thread = std::thread::Builder::new()
            .name("raft-log-io".into())
            .spawn(move || files.serve(rx))?;
        Ok(IoThread::Thread {
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    pub(crate) fn send(&self, job: Job) -> io::Result<()> {
        match self {
            IoThread::Inline(files) => {
                let mut files = files.lock();
                let mut next = Some(job);
                while let Some(job) = next.take() {
                    next = files.run(job, &mut || None);
                }
                Ok(())
            }
            IoThread::Thread { tx, .. } => {
                let tx = tx.lock();
                let tx = tx
                    .as_ref()
                    .ok_or_else(|| io::Error::other("the Raft log is closed"))?;
                tx.send(job)
                    .map_err(|_| io::Error::other("the Raft log's I/O thread stopped"))
            }
        }
    }
}

impl Drop for IoThread {
    fn drop(&mut self) {
        if let IoThread::Thread { tx, thread } = self {
            tx.lock().take();
            if let Some(t) = thread.lock().take() {
                let _ = t.join();
            }
        }
    }
}

/// The files, owned by the I/O thread.
#[derive(Debug)]
pub(crate) struct Files {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    segment_bytes: u64,
    sync: SyncPolicy,
    /// Written but not synced (with `EverySec`).
    unsynced: bool,
    segments: Vec<Segment>,
    /// The segment being appended to (the last of `segments`).
    open: Option<Box<dyn WritableFile>>,
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

impl Files {
    fn serve(&mut self, rx: Receiver<Job>) {
        let mut next = self.next_job(&rx);
        while let Some(job) = next.take() {
            next = self.run(job, &mut || rx.try_recv().ok());
            if next.is_none() {
                next = self.next_job(&rx);
            }
        }
    }

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

    /// Waits for the next job; meanwhile, with `EverySec`, syncs what was
    /// written once a second, and writes a commit point that waits.
    fn next_job(&mut self, rx: &Receiver<Job>) -> Option<Job> {
        loop {
            let every_sec = (self.sync == SyncPolicy::EverySec).then_some(Duration::from_secs(1));
            let commit = self.commit_pending.map(|_| {
                COMMIT_SAVE_EVERY.saturating_sub(
                    self.commit_saved_at
                        .map_or(COMMIT_SAVE_EVERY, |t| t.elapsed()),
                )
            });
            let wait = match (every_sec, commit) {
                (None, None) => return rx.recv().ok(),
                (a, b) => a.unwrap_or(Duration::MAX).min(b.unwrap_or(Duration::MAX)),
            };
            match rx.recv_timeout(wait) {
                Ok(job) => return Some(job),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if std::mem::take(&mut self.unsynced)
                        && let Err(e) = self.sync()
                    {
                        tracing::error!("raft log: sync failed: {e}");
                    }
                    self.save_commit(false);
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    self.save_commit(true);
                    return None;
                }
            }
        }
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
        file.write_all(records)?;
        for &(index, at) in indexes {
            seg.offsets.push((index, seg.bytes + at as u64));
        }
        seg.bytes += records.len() as u64;
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.guarded(|f| match f.open.as_mut() {
            Some(file) => file.sync_data(),
            None => Ok(()),
        })
    }

    /// Starts a new segment whose first entry is `first`. Its directory
    /// entry is synced before anything is acknowledged from it.
    fn begin_segment(&mut self, first: u64) -> io::Result<()> {
        if let Some(mut old) = self.open.take() {
            old.sync_data()?;
        }
        let name = segment::segment_name(first);
        // An empty segment left by a torn tail at its very start is
        // begun again, not listed twice.
        if self.segments.last().is_some_and(|s| s.name == name) {
            self.segments.pop();
        }
        let file = self.storage.create(&self.dir.join(&name))?;
        self.storage.sync_dir(&self.dir)?;
        self.open = Some(file);
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
        if let Some(mut f) = self.open.take() {
            f.sync_data()?;
        }
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
