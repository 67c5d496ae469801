//! A durable store's moving parts: the log, the checkpoint state, the
//! executor, and the trigger that starts checkpoints by log size and time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak, mpsc};
use std::time::Instant;

use parking_lot::Mutex;

use super::checkpoint::{self, CheckpointInfo, CheckpointKind};
use super::compact;
use super::delta::{self, DeltaFile};
use super::error::{CheckpointError, IoError, RecoveryError, WalError};
use super::executor::{Executor, Task, TaskError};
use super::lock::DirLock;
use super::record;
use super::recovery;
use super::wal::{Tick, Wal};
use super::{DurableConfig, PersistenceStats, RecoveryReport};
use crate::config::Geometry;
use crate::tree::Tree;
use crate::types::DurationHistogram;

/// Checkpoints kept: the newest, and the one before it to fall back to.
const CHECKPOINTS_KEPT: usize = 2;
/// Tasks the executor queues before `submit` waits.
const QUEUE_CAPACITY: usize = 4;

/// The checkpoint chain on disk, as this process knows it: the newest base
/// and the delta runs that follow it.
#[derive(Debug, Clone, Default)]
struct Chain {
    /// (version, bytes) of the base.
    base: Option<(u64, u64)>,
    /// (from, to, bytes) of each run, in order.
    deltas: Vec<(u64, u64, u64)>,
    /// The next checkpoint must be a full one.
    needs_full: bool,
}

impl Chain {
    /// The version the chain reaches.
    fn end(&self) -> Option<u64> {
        self.deltas.last().map(|d| d.1).or(self.base.map(|b| b.0))
    }

    fn delta_bytes(&self) -> u64 {
        self.deltas.iter().map(|d| d.2).sum()
    }

    /// Due for a merge: `after` runs, or runs holding half the base's bytes.
    fn wants_merge(&self, after: usize) -> bool {
        let base = self.base.map_or(0, |b| b.1);
        !self.deltas.is_empty()
            && (self.deltas.len() >= after.max(1) || 2 * self.delta_bytes() >= base)
    }

    /// The file that holds the chain's end.
    fn end_file(&self) -> String {
        match (self.deltas.last(), self.base) {
            (Some(d), _) => delta::delta_name(d.0, d.1),
            (None, Some(b)) => record::checkpoint_name(b.0),
            (None, None) => String::new(),
        }
    }
}

/// State shared by the store, checkpoint tasks and the trigger.
#[derive(Debug)]
pub(crate) struct Checkpoints {
    config: DurableConfig,
    max_value_len: usize,
    tree: OnceLock<Weak<Tree>>,
    wal: OnceLock<Weak<Wal>>,
    executor: OnceLock<Weak<Executor>>,
    /// A checkpoint is queued or running (BGSAVE refuses a second).
    running: AtomicBool,
    /// One checkpoint at a time.
    serial: Mutex<()>,
    /// Held by a clear for its whole run and by a checkpoint while it takes
    /// its version, so a checkpoint never sees a half-done clear.
    pub(crate) clear_lock: Mutex<()>,
    chain: Mutex<Chain>,
    /// One merge at a time; a checkpoint that must merge first waits here.
    merging: Mutex<()>,
    /// The base a merge is reading: retention keeps it and its runs.
    merge_input: Mutex<Option<u64>>,
    /// A merge task is queued or running.
    merge_queued: AtomicBool,
    /// Held while files are removed.
    files: Mutex<()>,
    last_started: Mutex<Instant>,
    ok: AtomicU64,
    failed: AtomicU64,
    last: Mutex<Option<CheckpointInfo>>,
    last_error: Mutex<Option<String>>,
    merges_ok: AtomicU64,
    merges_failed: AtomicU64,
    last_merge: Mutex<Option<CheckpointInfo>>,
    /// Each checkpoint's and each merge's `CheckpointInfo::duration`.
    checkpoint_durations: DurationHistogram,
    merge_durations: DurationHistogram,
}

impl Checkpoints {
    /// The state of a store just recovered, its checkpoint chain `chain`.
    fn new(
        config: &DurableConfig,
        max_value_len: usize,
        chain: &super::recovery::LoadedChain,
    ) -> Checkpoints {
        Checkpoints {
            config: config.clone(),
            max_value_len,
            tree: OnceLock::new(),
            wal: OnceLock::new(),
            executor: OnceLock::new(),
            running: AtomicBool::new(false),
            serial: Mutex::new(()),
            clear_lock: Mutex::new(()),
            chain: Mutex::new(Chain {
                base: chain.base,
                deltas: chain.deltas.clone(),
                needs_full: chain.needs_full,
            }),
            merging: Mutex::new(()),
            merge_input: Mutex::new(None),
            merge_queued: AtomicBool::new(false),
            files: Mutex::new(()),
            last_started: Mutex::new(Instant::now()),
            ok: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            last: Mutex::new(None),
            last_error: Mutex::new(None),
            merges_ok: AtomicU64::new(0),
            merges_failed: AtomicU64::new(0),
            last_merge: Mutex::new(None),
            checkpoint_durations: DurationHistogram::new(),
            merge_durations: DurationHistogram::new(),
        }
    }

    fn upgrade(&self) -> Result<(Arc<Tree>, Arc<Wal>), CheckpointError> {
        let tree = self
            .tree
            .get()
            .and_then(Weak::upgrade)
            .ok_or(CheckpointError::StoreGone)?;
        let wal = self
            .wal
            .get()
            .and_then(Weak::upgrade)
            .ok_or(CheckpointError::StoreGone)?;
        Ok((tree, wal))
    }

    /// Writes one checkpoint now (on the calling thread: a task's body): a
    /// delta run on the chain when there is one, else a full checkpoint.
    fn run(&self) -> Result<CheckpointInfo, CheckpointError> {
        let _one = self.serial.lock();
        let (tree, wal) = self.upgrade()?;
        *self.last_started.lock() = Instant::now();
        let storage = &*self.config.storage;
        let dir = &self.config.dir;
        // Back-pressure: runs may not outgrow the merges. Past twice the
        // merge point, merge here first (waiting for a background merge
        // if one is running); if that fails, a full checkpoint restarts
        // the chain.
        let limit = 2 * self.config.merge_after_deltas.max(1);
        if self.chain.lock().deltas.len() >= limit && self.merge().is_err() {
            self.chain.lock().needs_full = true;
        }
        let since = {
            let c = self.chain.lock();
            if self.config.delta_checkpoints && !c.needs_full {
                c.end()
            } else {
                None
            }
        };
        let spec = (since, &*wal.deletes);
        let sync = |v| wal.sync_through(v);
        let versions = checkpoint::Versions::Advancing(&sync);
        let mut info = checkpoint::write(
            &tree,
            storage,
            dir,
            &self.clear_lock,
            spec,
            versions,
            |_| {
                wal.counters
                    .bytes_since_checkpoint
                    .store(0, Ordering::Relaxed);
            },
        )?;
        {
            let mut c = self.chain.lock();
            match info.kind {
                CheckpointKind::Full => {
                    *c = Chain {
                        base: Some((info.version, info.bytes)),
                        ..Chain::default()
                    }
                }
                CheckpointKind::Delta { from } => c.deltas.push((from, info.version, info.bytes)),
                CheckpointKind::Unchanged => info.file = c.end_file(),
                CheckpointKind::Merged { .. } => {}
            }
        }
        // No later run starts below this checkpoint.
        wal.deletes.forget_upto(info.version);
        self.retain(&wal)?;
        Ok(info)
    }

    /// Merges the chain's base and runs into a new base (a task's body, or
    /// a checkpoint's back-pressure). Ok(None): nothing to merge.
    fn merge(&self) -> Result<Option<CheckpointInfo>, CheckpointError> {
        let _one = self.merging.lock();
        let (base, runs) = {
            let c = self.chain.lock();
            match c.base {
                Some((v, _)) if !c.deltas.is_empty() => (v, c.deltas.clone()),
                _ => return Ok(None),
            }
        };
        let (_, wal) = self.upgrade()?;
        let dir = &self.config.dir;
        let files: Vec<DeltaFile> = runs
            .iter()
            .map(|&(from, to, _)| DeltaFile {
                from,
                to,
                path: dir.join(delta::delta_name(from, to)),
            })
            .collect();
        *self.merge_input.lock() = Some(base);
        let base_path = dir.join(record::checkpoint_name(base));
        let result = compact::merge(
            &*self.config.storage,
            dir,
            (base, &base_path),
            &files,
            self.max_value_len,
        );
        *self.merge_input.lock() = None;
        match &result {
            Ok(info) => {
                {
                    let mut c = self.chain.lock();
                    // A full checkpoint meanwhile started a newer chain.
                    if c.base.map(|b| b.0) == Some(base) {
                        c.base = Some((info.version, info.bytes));
                        c.deltas.retain(|d| d.0 >= info.version);
                    }
                }
                self.merges_ok.fetch_add(1, Ordering::Relaxed);
                self.merge_durations.observe(info.duration);
                *self.last_merge.lock() = Some(info.clone());
            }
            Err(e) => {
                // A run that cannot be read back breaks the chain for
                // recovery too: the next checkpoint starts a new one.
                self.chain.lock().needs_full = true;
                self.merges_failed.fetch_add(1, Ordering::Relaxed);
                *self.last_error.lock() = Some(format!("merge: {e}"));
            }
        }
        let info = result?;
        self.retain(&wal)?;
        Ok(Some(info))
    }

    /// Removes what no recovery needs: bases but the two newest (and the
    /// chain's, and a running merge's input), runs older than every kept
    /// base, and log segments below where the older base's chain ends (so
    /// that one damaged file, a run or the newest base, still leaves a
    /// point the log reaches).
    fn retain(&self, wal: &Wal) -> Result<(), CheckpointError> {
        let _files = self.files.lock();
        let storage = &*self.config.storage;
        let dir = &self.config.dir;
        let err = IoError::doing("removing old checkpoints");
        let chain = self.chain.lock().clone();
        let input = *self.merge_input.lock();
        let bases = checkpoint::list(storage, dir).map_err(err)?;
        let keep: Vec<u64> = bases
            .iter()
            .take(CHECKPOINTS_KEPT)
            .map(|b| b.0)
            .chain(chain.base.map(|b| b.0))
            .chain(input)
            .collect();
        let mut removed = false;
        for (v, path) in &bases {
            if !keep.contains(v) {
                storage
                    .remove(path)
                    .map_err(IoError::doing("removing old checkpoints"))?;
                removed = true;
            }
        }
        let oldest = keep.iter().copied().min().unwrap_or(u64::MAX);
        let runs = delta::list(storage, dir).map_err(IoError::doing("listing delta runs"))?;
        for d in &runs {
            if d.from < oldest {
                storage
                    .remove(&d.path)
                    .map_err(IoError::doing("removing old delta runs"))?;
                removed = true;
            }
        }
        if removed {
            storage
                .sync_dir(dir)
                .map_err(IoError::doing("removing old checkpoints"))?;
        }
        // The log must reach back to where the older base's chain ends: a
        // damaged run makes recovery stop before it, and a damaged newest
        // base makes it take the older base and its runs (which reach the
        // newest base's version when it was merged from them).
        let newest = chain.base.map(|b| b.0);
        let older = keep
            .iter()
            .copied()
            .filter(|&v| newest.is_none_or(|n| v < n))
            .max();
        if let (Some(older), Some(newest)) = (older, newest) {
            // (The runs removed above all start below `older`.)
            let mut end = older;
            while let Some(d) = runs.iter().filter(|d| d.from == end).max_by_key(|d| d.to) {
                end = d.to;
            }
            wal.remove_segments_upto(end.min(newest))
                .map_err(IoError::doing("removing old log segments"))?;
        }
        Ok(())
    }

    /// Queues a background merge if the chain is due for one.
    fn maybe_merge(self: &Arc<Self>) {
        if !self
            .chain
            .lock()
            .wants_merge(self.config.merge_after_deltas)
        {
            return;
        }
        let Some(executor) = self.executor.get().and_then(Weak::upgrade) else {
            return;
        };
        if self.merge_queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let task = MergeTask {
            state: Arc::clone(self),
        };
        if executor.try_submit(Box::new(task)).is_err() {
            self.merge_queued.store(false, Ordering::Release);
        }
    }

    fn record(&self, outcome: &Result<CheckpointInfo, CheckpointError>) {
        match outcome {
            Ok(info) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
                self.checkpoint_durations.observe(info.duration);
                *self.last.lock() = Some(info.clone());
            }
            Err(e) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                *self.last_error.lock() = Some(e.to_string());
            }
        }
    }
}

/// One background merge of the chain into a new base.
struct MergeTask {
    state: Arc<Checkpoints>,
}

impl Task for MergeTask {
    fn name(&self) -> String {
        "merge".into()
    }
    fn run_cpu(&mut self) -> Result<(), TaskError> {
        self.state.merge().map_err(TaskError::Checkpoint)?;
        Ok(())
    }
    fn finish(&mut self, _outcome: Result<(), TaskError>) {
        // `merge` recorded the outcome.
        self.state.merge_queued.store(false, Ordering::Release);
    }
}

/// One checkpoint as an executor task.
struct CheckpointTask {
    state: Arc<Checkpoints>,
    info: Option<CheckpointInfo>,
    reply: Option<mpsc::Sender<Result<CheckpointInfo, CheckpointError>>>,
}

impl Task for CheckpointTask {
    fn name(&self) -> String {
        "checkpoint".into()
    }
    fn run_cpu(&mut self) -> Result<(), TaskError> {
        self.info = Some(self.state.run().map_err(TaskError::Checkpoint)?);
        Ok(())
    }
    fn finish(&mut self, outcome: Result<(), TaskError>) {
        let outcome = match outcome {
            Ok(()) => Ok(self.info.take().expect("a finished checkpoint")),
            Err(TaskError::Checkpoint(e)) => Err(e),
            // The executor retries a failed offload on the CPU and hands
            // over that outcome; an offload error never arrives here.
            Err(TaskError::Offload { source, .. }) => Err(CheckpointError::Io(source)),
        };
        self.state.record(&outcome);
        self.state.running.store(false, Ordering::Release);
        if outcome.is_ok() {
            self.state.maybe_merge();
        }
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(outcome);
        }
    }
}

/// Starts a checkpoint unless one is queued or running. True if started.
fn start_background(state: &Arc<Checkpoints>, executor: &Executor) -> bool {
    if state.running.swap(true, Ordering::AcqRel) {
        return false;
    }
    let task = CheckpointTask {
        state: Arc::clone(state),
        info: None,
        reply: None,
    };
    if executor.try_submit(Box::new(task)).is_err() {
        state.running.store(false, Ordering::Release);
        return false;
    }
    true
}

/// Why SAVE took no checkpoint.
#[derive(Debug)]
pub(crate) enum SaveError {
    /// The log failed, or the store shut down, before the checkpoint ran.
    ReadOnly(WalError),
    /// The checkpoint itself failed.
    Failed(CheckpointError),
}

/// What the log runs after each append: starts a checkpoint once the log
/// has grown by `checkpoint_wal_bytes` since the last, or, if it grew at
/// all, once `checkpoint_interval` passed.
fn checkpoint_tick(
    state: &Arc<Checkpoints>,
    executor: &Arc<Executor>,
    config: &DurableConfig,
) -> Tick {
    let (state, executor) = (Arc::clone(state), Arc::clone(executor));
    let (by_bytes, by_time) = (config.checkpoint_wal_bytes, config.checkpoint_interval);
    Box::new(move |wal: &Wal| {
        let since = wal.counters.bytes_since_checkpoint.load(Ordering::Relaxed);
        let due =
            since >= by_bytes || (since > 0 && state.last_started.lock().elapsed() >= by_time);
        if due && wal.failure().is_none() {
            start_background(&state, &executor);
        }
    })
}

/// The durable part of a store.
#[derive(Debug)]
pub(crate) struct Durable {
    pub(crate) wal: Arc<Wal>,
    pub(crate) checkpoints: Arc<Checkpoints>,
    executor: Arc<Executor>,
    report: RecoveryReport,
    shut: Mutex<Option<Result<(), WalError>>>,
    /// The directory's lock, held while the store is open (the last field:
    /// dropped after everything that writes there has stopped).
    _lock: DirLock,
}

impl Durable {
    /// Recovers the data in `config.dir` and starts the log and the
    /// executor. Returns the tree (its log hook set) and the runtime.
    pub(crate) fn open(
        g: &Geometry,
        max_value_len: usize,
        config: DurableConfig,
    ) -> Result<(Arc<Tree>, Durable), RecoveryError> {
        // Locked before recovery reads anything: a second process would
        // replay a log the first is still appending to, and both would
        // then write it (see `lock`).
        config
            .storage
            .create_dir_all(&config.dir)
            .map_err(IoError::doing("creating the data directory"))?;
        let lock = config.storage.lock_dir(&config.dir)?;
        let rec = recovery::recover(
            g,
            max_value_len,
            &*config.storage,
            &config.dir,
            config.truncate_corrupt,
            config.progress.as_deref(),
        )?;
        let mut tree = rec.tree;
        remove_unfinished(&*config.storage, &config.dir)
            .map_err(IoError::doing("removing unfinished checkpoints"))?;
        let state = Arc::new(Checkpoints::new(&config, max_value_len, &rec.chain));
        let executor = Arc::new(Executor::new(
            config.background_threads,
            QUEUE_CAPACITY,
            Vec::new(),
        ));
        let tick = checkpoint_tick(&state, &executor, &config);
        let replayed_bytes: u64 = rec.log.segments.iter().map(|s| s.bytes).sum();
        let wal = Wal::open(
            config.dir.clone(),
            Arc::clone(&config.storage),
            config.mode,
            config.wal_segment_bytes,
            tree.version_clock(),
            rec.log,
            tick,
        )
        .map_err(IoError::doing("opening the write-ahead log"))?;
        if rec.report.records_replayed > 0 {
            wal.counters
                .bytes_since_checkpoint
                .store(replayed_bytes, Ordering::Relaxed);
        }
        tree.set_log(Arc::clone(&wal) as Arc<dyn crate::tree::VersionLog>);
        let tree = Arc::new(tree);
        state.tree.set(Arc::downgrade(&tree)).expect("set once");
        state.wal.set(Arc::downgrade(&wal)).expect("set once");
        state
            .executor
            .set(Arc::downgrade(&executor))
            .expect("set once");
        Ok((
            tree,
            Durable {
                wal,
                checkpoints: state,
                executor,
                report: rec.report,
                shut: Mutex::new(None),
                _lock: lock,
            },
        ))
    }

    /// Where the store's files go (a backup writes through it too, so a
    /// fault-injecting storage reaches backups as well).
    pub(crate) fn storage(&self) -> &dyn super::file::Storage {
        &*self.checkpoints.config.storage
    }

    /// Held by a clear for its whole run (see `Checkpoints::clear_lock`).
    pub(crate) fn clear_lock(&self) -> &Mutex<()> {
        &self.checkpoints.clear_lock
    }

    pub(crate) fn report(&self) -> &RecoveryReport {
        &self.report
    }

    /// SAVE: runs a checkpoint on the executor and waits for it.
    pub(crate) fn checkpoint(&self) -> Result<CheckpointInfo, SaveError> {
        if let Some(cause) = self.wal.failure() {
            return Err(SaveError::ReadOnly(cause));
        }
        // Wait for a running one to finish, then run ours.
        loop {
            if !self.checkpoints.running.swap(true, Ordering::AcqRel) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let (tx, rx) = mpsc::channel();
        let task = CheckpointTask {
            state: Arc::clone(&self.checkpoints),
            info: None,
            reply: Some(tx),
        };
        if self.executor.submit(Box::new(task)).is_err() {
            self.checkpoints.running.store(false, Ordering::Release);
            return Err(SaveError::ReadOnly(WalError::ShutDown));
        }
        match rx.recv() {
            Ok(r) => r.map_err(SaveError::Failed),
            Err(_) => Err(SaveError::Failed(CheckpointError::TaskDropped)),
        }
    }

    /// BGSAVE: false if a checkpoint is already queued or running.
    pub(crate) fn checkpoint_in_background(&self) -> Result<bool, WalError> {
        if let Some(cause) = self.wal.failure() {
            return Err(cause);
        }
        Ok(start_background(&self.checkpoints, &self.executor))
    }

    /// Switches the log's durability mode (`Wal::set_mode`).
    pub(crate) fn set_mode(&self, mode: super::Durability) -> Result<(), WalError> {
        self.wal.set_mode(mode)
    }

    pub(crate) fn stats(&self) -> PersistenceStats {
        let segs = self.wal.segments.lock().clone();
        let c = &self.wal.counters;
        let s = &self.checkpoints;
        let chain = s.chain.lock().clone();
        PersistenceStats {
            enabled: true,
            mode: self.wal.mode(),
            dir: self.wal.dir().to_path_buf(),
            wal_bytes: segs.iter().map(|s| s.bytes).sum(),
            wal_segments: segs.len(),
            wal_records_written: c.records.load(Ordering::Relaxed),
            wal_bytes_since_checkpoint: c.bytes_since_checkpoint.load(Ordering::Relaxed),
            durable_version: self.wal.durable_version(),
            fsyncs: c.fsyncs.load(Ordering::Relaxed),
            fsync_durations: c.fsync_durations.snapshot(),
            checkpoint_in_progress: s.running.load(Ordering::Acquire),
            checkpoints_ok: s.ok.load(Ordering::Relaxed),
            checkpoints_failed: s.failed.load(Ordering::Relaxed),
            last_checkpoint: s.last.lock().clone(),
            checkpoint_durations: s.checkpoint_durations.snapshot(),
            last_checkpoint_error: s.last_error.lock().clone(),
            base_checkpoint: chain.base,
            delta_runs: chain.deltas.len(),
            delta_bytes: chain.delta_bytes(),
            merges_ok: s.merges_ok.load(Ordering::Relaxed),
            merges_failed: s.merges_failed.load(Ordering::Relaxed),
            last_merge: s.last_merge.lock().clone(),
            merge_durations: s.merge_durations.snapshot(),
            read_only: self.wal.failure().map(|e| e.to_string()),
            recovery: self.report.clone(),
            executor: self.executor.stats(),
        }
    }

    /// Stops background work, writes and fsyncs the log, stops the flusher.
    /// Idempotent: later calls return the first outcome.
    pub(crate) fn shutdown(&self) -> Result<(), WalError> {
        let mut shut = self.shut.lock();
        if shut.is_none() {
            self.executor.stop();
            *shut = Some(self.wal.shutdown());
        }
        shut.clone().expect("set above")
    }
}

/// Removes `.tmp` files a crash left behind (a checkpoint, run or merge
/// that never finished): only while no task can be writing one.
fn remove_unfinished(
    storage: &dyn super::file::Storage,
    dir: &std::path::Path,
) -> std::io::Result<()> {
    let mut removed = false;
    for name in storage.list(dir)? {
        if (name.starts_with("ckpt-") || name.starts_with("delta-")) && name.ends_with(".tmp") {
            storage.remove(&dir.join(name))?;
            removed = true;
        }
    }
    if removed {
        storage.sync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
