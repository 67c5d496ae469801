//! Durability (`docs/design.md`, "Durability"): a write-ahead log with group commit,
//! checkpoints from MVCC snapshots, recovery by bulk loading and log
//! replay, and a background executor for checkpoint work. File formats,
//! sync points and recovery rules: docs/design.md, "Durability".
//!
//! - `file`: the storage trait, the real file system, the fault-injecting one
//! - `record`: byte formats of log records, segments and checkpoints
//! - `wal`: the log, its flusher thread and group commit
//! - `checkpoint`: writing and reading checkpoints
//! - `recovery`: checkpoint load + log replay
//! - `executor`: builder / dispatcher / driver for background tasks
//! - `check`: offline verification of a data directory
//! - `runtime`: how a durable store ties them together
//! - `error`: what each part reports when it fails (`WalError`,
//!   `CheckpointError`, `RecoveryError`, over `IoError`)

pub mod check;
pub(crate) mod checkpoint;
mod error;
pub(crate) mod executor;
pub mod file;
pub(crate) mod record;
pub(crate) mod recovery;
pub(crate) mod runtime;
pub(crate) mod wal;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use checkpoint::CheckpointInfo;
pub use error::{
    CheckpointError, Damage, IoError, ItemRefused, ParseDurabilityError, RecordRefused,
    RecoveryError, WalError,
};
pub use executor::ExecutorStats;
pub use file::{FaultyStorage, FileNames, FsStorage, Storage, WritableFile};

/// When a write is acknowledged relative to its log record reaching disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Acknowledged (and visible to readers) only after the fdatasync that
    /// covers its record. Group commit: one fsync covers every record
    /// buffered meanwhile.
    #[default]
    Always,
    /// Acknowledged at once; the log is written every 10 ms and fsynced once
    /// a second. A crash loses at most about the last second.
    EverySec,
    /// Acknowledged at once; the log is written every 10 ms and never
    /// fsynced (the OS writes it back). Survives a process crash once
    /// written, not a power loss.
    None,
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Durability::Always => "always",
            Durability::EverySec => "everysec",
            Durability::None => "none",
        })
    }
}

impl std::str::FromStr for Durability {
    type Err = ParseDurabilityError;
    fn from_str(s: &str) -> Result<Self, ParseDurabilityError> {
        match s.to_ascii_lowercase().as_str() {
            "always" => Ok(Durability::Always),
            "everysec" => Ok(Durability::EverySec),
            "none" | "no" => Ok(Durability::None),
            other => Err(ParseDurabilityError::new(other)),
        }
    }
}

/// How a durable store keeps its data.
#[derive(Debug, Clone)]
pub struct DurableConfig {
    /// The data directory (created if missing).
    pub dir: PathBuf,
    pub mode: Durability,
    /// A log segment is closed and a new one started past this size
    /// (default 64 MiB).
    pub wal_segment_bytes: u64,
    /// A checkpoint starts once this many log bytes were written since the
    /// last one (default 256 MiB).
    pub checkpoint_wal_bytes: u64,
    /// A checkpoint starts this long after the last one if anything was
    /// written (default 5 minutes).
    pub checkpoint_interval: Duration,
    /// Worker threads of the background executor (default 1).
    pub background_threads: usize,
    /// Where files go: the real file system by default; tests pass a
    /// `FaultyStorage`.
    pub storage: Arc<dyn Storage>,
}

impl DurableConfig {
    /// `Always` durability in `dir` with the default limits.
    pub fn new(dir: impl Into<PathBuf>) -> DurableConfig {
        DurableConfig {
            dir: dir.into(),
            mode: Durability::Always,
            wal_segment_bytes: 64 << 20,
            checkpoint_wal_bytes: 256 << 20,
            checkpoint_interval: Duration::from_secs(300),
            background_threads: 1,
            storage: Arc::new(FsStorage),
        }
    }

    pub fn with_mode(mut self, mode: Durability) -> DurableConfig {
        self.mode = mode;
        self
    }
}

/// The checkpoint recovery loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedCheckpoint {
    pub file: String,
    pub version: u64,
    pub items: u64,
}

/// Where recovery cut the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailCut {
    pub segment: String,
    /// Offset of the first invalid byte; the segment was truncated here.
    pub offset: u64,
    pub dropped_bytes: u64,
    pub reason: String,
}

/// What `Store::open` found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub checkpoint: Option<LoadedCheckpoint>,
    /// Checkpoints that failed verification: (file, why). Recovery fell
    /// back to an older one.
    pub skipped_checkpoints: Vec<(String, String)>,
    pub segments_replayed: usize,
    pub records_replayed: u64,
    /// Records at or below the checkpoint version (already in it).
    pub records_skipped: u64,
    pub tail_cut: Option<TailCut>,
    /// Segments after a cut, renamed `<name>.discarded`.
    pub discarded_segments: Vec<String>,
    /// The clock restarted here: every recovered version is at most this.
    pub max_version: u64,
    pub load_time: Duration,
    pub replay_time: Duration,
}

impl fmt::Display for RecoveryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.checkpoint {
            Some(c) => write!(
                f,
                "loaded checkpoint {} (version {}, {} items) in {:.3}s",
                c.file,
                c.version,
                c.items,
                self.load_time.as_secs_f64()
            )?,
            None => write!(f, "no checkpoint loaded")?,
        }
        write!(
            f,
            "; replayed {} records from {} segments in {:.3}s ({} already in the checkpoint); versions restart above {}",
            self.records_replayed,
            self.segments_replayed,
            self.replay_time.as_secs_f64(),
            self.records_skipped,
            self.max_version
        )?;
        for (file, why) in &self.skipped_checkpoints {
            write!(f, "; skipped corrupt checkpoint {file}: {why}")?;
        }
        if let Some(c) = &self.tail_cut {
            write!(
                f,
                "; log cut in {} at offset {} ({}), {} bytes dropped",
                c.segment, c.offset, c.reason, c.dropped_bytes
            )?;
        }
        if !self.discarded_segments.is_empty() {
            write!(
                f,
                "; segments set aside as .discarded: {}",
                self.discarded_segments.join(", ")
            )?;
        }
        Ok(())
    }
}

/// Durability figures for INFO persistence.
#[derive(Debug, Clone, Default)]
pub struct PersistenceStats {
    /// False for a purely in-memory store (`Store::new`); the rest is empty.
    pub enabled: bool,
    pub mode: Durability,
    pub dir: PathBuf,
    /// Bytes and number of the log segments on disk.
    pub wal_bytes: u64,
    pub wal_segments: usize,
    pub wal_records_written: u64,
    pub wal_bytes_since_checkpoint: u64,
    /// Every version up to this is durable (`Always`: fsynced).
    pub durable_version: u64,
    pub fsyncs: u64,
    pub checkpoint_in_progress: bool,
    pub checkpoints_ok: u64,
    pub checkpoints_failed: u64,
    pub last_checkpoint: Option<CheckpointInfo>,
    pub last_checkpoint_error: Option<String>,
    /// Set once a log failure made the store read-only: the cause.
    pub read_only: Option<String>,
    pub recovery: RecoveryReport,
    pub executor: ExecutorStats,
}
