//! A durable store's moving parts: the log, the checkpoint state, the
//! executor, and the trigger that starts checkpoints by log size and time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak, mpsc};
use std::time::Instant;

use parking_lot::Mutex;

use super::checkpoint::{self, CheckpointInfo};
use super::error::{CheckpointError, IoError, RecoveryError, WalError};
use super::executor::{Executor, Task, TaskError};
use super::recovery;
use super::wal::{Tick, Wal};
use super::{DurableConfig, PersistenceStats, RecoveryReport};
use crate::config::Geometry;
use crate::tree::Tree;

/// Checkpoints kept: the newest, and the one before it to fall back to.
const CHECKPOINTS_KEPT: usize = 2;
/// Tasks the executor queues before `submit` waits.
const QUEUE_CAPACITY: usize = 4;

/// State shared by the store, checkpoint tasks and the trigger.
#[derive(Debug)]
pub(crate) struct Checkpoints {
    config: DurableConfig,
    tree: OnceLock<Weak<Tree>>,
    wal: OnceLock<Weak<Wal>>,
    /// A checkpoint is queued or running (BGSAVE refuses a second).
    running: AtomicBool,
    /// One checkpoint at a time.
    serial: Mutex<()>,
    /// Held by a clear for its whole run and by a checkpoint while it takes
    /// its version, so a checkpoint never sees a half-done clear.
    pub(crate) clear_lock: Mutex<()>,
    last_started: Mutex<Instant>,
    ok: AtomicU64,
    failed: AtomicU64,
    last: Mutex<Option<CheckpointInfo>>,
    last_error: Mutex<Option<String>>,
}

impl Checkpoints {
    /// Writes one checkpoint now (on the calling thread: a task's body).
    fn run(&self) -> Result<CheckpointInfo, CheckpointError> {
        let _one = self.serial.lock();
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
        *self.last_started.lock() = Instant::now();
        let storage = &*self.config.storage;
        let dir = &self.config.dir;
        let info = checkpoint::write(&tree, storage, dir, &self.clear_lock, |_| {
            wal.counters
                .bytes_since_checkpoint
                .store(0, Ordering::Relaxed);
        })?;
        // The log must reach back to the oldest kept checkpoint, so that
        // recovery can fall back to it with nothing lost.
        let all = checkpoint::retain(storage, dir, CHECKPOINTS_KEPT)
            .map_err(IoError::doing("removing old checkpoints"))?;
        if checkpoint::list(storage, dir).map_or(0, |l| l.len()) >= CHECKPOINTS_KEPT {
            wal.remove_segments_upto(all)
                .map_err(IoError::doing("removing old log segments"))?;
        }
        Ok(info)
    }

    fn record(&self, outcome: &Result<CheckpointInfo, CheckpointError>) {
        match outcome {
            Ok(info) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
                *self.last.lock() = Some(info.clone());
            }
            Err(e) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                *self.last_error.lock() = Some(e.to_string());
            }
        }
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

/// The durable part of a store.
#[derive(Debug)]
pub(crate) struct Durable {
    pub(crate) wal: Arc<Wal>,
    pub(crate) checkpoints: Arc<Checkpoints>,
    executor: Arc<Executor>,
    report: RecoveryReport,
    shut: Mutex<Option<Result<(), WalError>>>,
}

impl Durable {
    /// Recovers the data in `config.dir` and starts the log and the
    /// executor. Returns the tree (its log hook set) and the runtime.
    pub(crate) fn open(
        g: &Geometry,
        max_value_len: usize,
        config: DurableConfig,
    ) -> Result<(Arc<Tree>, Durable), RecoveryError> {
        let rec = recovery::recover(
            g,
            max_value_len,
            &*config.storage,
            &config.dir,
            config.truncate_corrupt,
        )?;
        let mut tree = rec.tree;
        let state = Arc::new(Checkpoints {
            config: config.clone(),
            tree: OnceLock::new(),
            wal: OnceLock::new(),
            running: AtomicBool::new(false),
            serial: Mutex::new(()),
            clear_lock: Mutex::new(()),
            last_started: Mutex::new(Instant::now()),
            ok: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            last: Mutex::new(None),
            last_error: Mutex::new(None),
        });
        let executor = Arc::new(Executor::new(
            config.background_threads,
            QUEUE_CAPACITY,
            Vec::new(),
        ));
        let tick: Tick = {
            let state = Arc::clone(&state);
            let executor = Arc::clone(&executor);
            let (by_bytes, by_time) = (config.checkpoint_wal_bytes, config.checkpoint_interval);
            Box::new(move |wal: &Wal| {
                let since = wal.counters.bytes_since_checkpoint.load(Ordering::Relaxed);
                let due = since >= by_bytes
                    || (since > 0 && state.last_started.lock().elapsed() >= by_time);
                if due && wal.failure().is_none() {
                    start_background(&state, &executor);
                }
            })
        };
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
        Ok((
            tree,
            Durable {
                wal,
                checkpoints: state,
                executor,
                report: rec.report,
                shut: Mutex::new(None),
            },
        ))
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

    pub(crate) fn stats(&self) -> PersistenceStats {
        let segs = self.wal.segments.lock().clone();
        let c = &self.wal.counters;
        let s = &self.checkpoints;
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
            checkpoint_in_progress: s.running.load(Ordering::Acquire),
            checkpoints_ok: s.ok.load(Ordering::Relaxed),
            checkpoints_failed: s.failed.load(Ordering::Relaxed),
            last_checkpoint: s.last.lock().clone(),
            last_checkpoint_error: s.last_error.lock().clone(),
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
