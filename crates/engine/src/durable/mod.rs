//! Durability (`docs/design.md`, "Durability"): a write-ahead log with group commit,
//! checkpoints from MVCC snapshots, recovery by bulk loading and log
//! replay, and a background executor for checkpoint work. File formats,
//! sync points and recovery rules: docs/design.md, "Durability".
//!
//! - `file`: the storage trait, the real file system, the fault-injecting one
//! - `frame`: the checksummed length-prefixed framing of log records,
//!   checkpoint blocks and the Raft log's records (`combkv-replica`)
//! - `record`: byte formats of log records, segments and checkpoints
//! - `wal`: the log, its flusher thread and group commit
//! - `checkpoint`: writing and reading checkpoints (and the block file
//!   format they share with delta runs)
//! - `delta`: delta runs, the leaves changed since the last checkpoint
//! - `deletes`: the keys deleted since the last checkpoint, for delta runs
//! - `overlay`: delta runs composed in memory and merged with a base
//! - `compact`: checkpoint chains: loading one, merging one into a base
//! - `recovery`: checkpoint load + log replay
//! - `cut`: where the log ends, torn tail or corruption, what a cut drops,
//!   and the version floor that keeps dropped versions from coming back
//! - `executor`: builder / dispatcher / driver for background tasks
//! - `check`: offline verification of a data directory
//! - `lock`: the data directory's lock (one writing process at a time)
//! - `runtime`: how a durable store ties them together
//! - `error`: what each part reports when it fails (`WalError`,
//!   `CheckpointError`, `RecoveryError`, over `IoError`)

pub(crate) mod blocks;
pub mod check;
pub(crate) mod checkpoint;
pub(crate) mod compact;
pub(crate) mod cut;
pub(crate) mod deletes;
pub(crate) mod delta;
mod error;
pub(crate) mod executor;
pub mod file;
pub mod frame;
mod io_error;
mod lock;
pub(crate) mod overlay;
pub(crate) mod record;
pub(crate) mod recovery;
mod replay;
pub(crate) mod runtime;
pub(crate) mod segments;
pub(crate) mod wal;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::types::HistogramSnapshot;

pub use checkpoint::{CheckpointInfo, CheckpointKind};
pub use cut::{FLOOR_FILE, RepairReport, repair, repair_with};
pub use error::{
    CheckpointError, CorruptLog, Damage, IoError, ItemRefused, ParseDurabilityError, RecordRefused,
    RecoveryError, WalError,
};
pub use executor::ExecutorStats;
pub use file::{FaultyStorage, FileNames, FsStorage, Storage, WritableFile};
pub use lock::{DirInUse, DirLock, LOCK_FILE, LockError};

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
    /// When a write is acknowledged relative to its log record reaching
    /// disk (default [`Durability::Always`]).
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
    /// Incremental checkpoints (default on): after a base checkpoint, each
    /// checkpoint writes only the leaves changed since the one before as a
    /// delta run. Off: every checkpoint is a full one.
    pub delta_checkpoints: bool,
    /// The background executor merges a base and its runs into a new base
    /// once this many runs follow it, or once they hold half the base's
    /// bytes (default 4). At twice as many, a checkpoint first merges on
    /// its own thread (back-pressure).
    pub merge_after_deltas: usize,
    /// Where files go: the real file system by default; tests pass a
    /// `FaultyStorage`.
    pub storage: Arc<dyn Storage>,
    /// What recovery does with a *corrupt* log: damage that a crash cannot
    /// have left (valid records after it, or later segments). False (the
    /// default): refuse to open (`RecoveryError::CorruptLog`, nothing is
    /// changed). True: cut the log there as `combkv check --repair` does,
    /// set what follows aside as `.discarded` files, and restart versions
    /// above everything it held. A torn tail is cut either way.
    pub truncate_corrupt: bool,
    /// Where recovery reports how far it has read, for a server that
    /// answers `LOADING` meanwhile (Redis's `loading_loaded_perc`).
    pub progress: Option<Arc<RecoveryProgress>>,
}

/// How far recovery has read: bytes of checkpoint and log files in all,
/// and bytes done. Checkpoint items count their key and value bytes as
/// they load (a little under the file's bytes), log segments their whole
/// size once replayed, so `done` stays below `total` until the end.
#[derive(Debug, Default)]
pub struct RecoveryProgress {
    total: std::sync::atomic::AtomicU64,
    done: std::sync::atomic::AtomicU64,
}

impl RecoveryProgress {
    /// (bytes done, bytes in all) so far; (0, 0) before recovery has
    /// listed its files.
    pub fn get(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let total = self.total.load(Relaxed);
        (self.done.load(Relaxed).min(total), total)
    }

    pub(crate) fn set_total(&self, bytes: u64) {
        self.total
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn add(&self, bytes: u64) {
        self.done
            .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
    }
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
            delta_checkpoints: true,
            merge_after_deltas: 4,
            storage: Arc::new(FsStorage),
            truncate_corrupt: false,
            progress: None,
        }
    }

    /// This config with `mode` as its durability, for a builder-style
    /// `DurableConfig::new(dir).with_mode(Durability::EverySec)`.
    pub fn with_mode(mut self, mode: Durability) -> DurableConfig {
        self.mode = mode;
        self
    }
}

/// The checkpoint recovery loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedCheckpoint {
    /// The base checkpoint.
    pub file: String,
    /// The version reached: the base's, or its last delta run's.
    pub version: u64,
    /// Items loaded (base and runs merged).
    pub items: u64,
    /// The delta runs applied on the base, in order.
    pub deltas: Vec<String>,
}

/// What a cut of the log drops: the rest of the segment it is in, and
/// every later segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Bytes after the cut, in its segment and in the later ones.
    pub bytes: u64,
    /// Well-formed records (frame, lengths and checksum hold, version above
    /// the last one kept) a resync scan finds in those bytes.
    pub records: u64,
    /// The later segments, set aside whole.
    pub segments: Vec<String>,
    /// The lowest and highest version of those records.
    pub versions: Option<(u64, u64)>,
    /// The highest version the dropped bytes may have handed out: their
    /// records', the start versions of the later segments, and (when
    /// nothing else bounds it) the version field of the damaged record.
    /// New writes must take versions above it. 0: none.
    pub highest_version: u64,
}

impl fmt::Display for Dropped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} bytes holding {} well-formed records",
            self.bytes, self.records
        )?;
        if let Some((lo, hi)) = self.versions {
            write!(f, " (versions {lo}..={hi})")?;
        }
        match self.segments.len() {
            0 => Ok(()),
            1 => write!(f, ", in 1 later segment ({})", self.segments[0]),
            n => write!(
                f,
                ", in {n} later segments ({} .. {})",
                self.segments[0],
                self.segments[n - 1]
            ),
        }
    }
}

/// Where recovery cut the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailCut {
    /// The segment the cut was made in (its file name).
    pub segment: String,
    /// Offset of the first invalid byte; the segment was truncated here.
    pub offset: u64,
    /// Bytes dropped from `segment` itself.
    pub dropped_bytes: u64,
    /// What was wrong at `offset` (a torn frame, a bad checksum, ...).
    pub reason: String,
    /// The damage was corruption, not a torn tail: the cut was made only
    /// because the operator asked for it (`truncate_corrupt`, `combkv
    /// check --repair`).
    pub corrupt: bool,
    /// Everything the cut dropped, later segments included.
    pub dropped: Dropped,
    /// A copy of the whole segment as it was before the cut (a corrupt cut
    /// keeps one), named `<segment>.discarded`.
    pub copy: Option<String>,
}

impl fmt::Display for TailCut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.corrupt {
            "corrupt log cut"
        } else {
            "log cut"
        };
        write!(
            f,
            "{what} in {} at offset {} ({}): dropped {}",
            self.segment, self.offset, self.reason, self.dropped
        )?;
        if let Some(copy) = &self.copy {
            write!(f, "; the segment as it was is kept as {copy}")?;
        }
        Ok(())
    }
}

/// What `Store::open` found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The checkpoint loaded (`None`: none was usable, or there was none,
    /// and the store was rebuilt from the log alone).
    pub checkpoint: Option<LoadedCheckpoint>,
    /// Checkpoints that failed verification: (file, why). Recovery fell
    /// back to an older one.
    pub skipped_checkpoints: Vec<(String, String)>,
    /// Log segments read after the checkpoint.
    pub segments_replayed: usize,
    /// Records applied from the log (those above the checkpoint version).
    pub records_replayed: u64,
    /// Records at or below the checkpoint version (already in it).
    pub records_skipped: u64,
    /// Where the log was cut (a torn tail, or corruption the operator let
    /// recovery cut); `None`: the log ended cleanly.
    pub tail_cut: Option<TailCut>,
    /// Segments after a cut, renamed `<name>.discarded`.
    pub discarded_segments: Vec<String>,
    /// The version floor in force (the `version-floor` file): versions up
    /// to it were handed out by data a cut dropped, now or earlier.
    pub version_floor: Option<u64>,
    /// The clock restarted here: every recovered version is at most this,
    /// and so is the version floor.
    pub max_version: u64,
    /// Time spent building the tree: the checkpoint (base and delta runs)
    /// and the log's records above it, merged in one bulk load.
    pub load_time: Duration,
    /// Time spent reading the log and sorting its records for the load.
    pub replay_time: Duration,
}

impl fmt::Display for RecoveryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.checkpoint {
            Some(c) if c.deltas.is_empty() => write!(
                f,
                "loaded checkpoint {} (version {}, {} items) in {:.3}s",
                c.file,
                c.version,
                c.items,
                self.load_time.as_secs_f64()
            )?,
            Some(c) => write!(
                f,
                "loaded checkpoint {} with {} delta runs to version {} ({} items) in {:.3}s",
                c.file,
                c.deltas.len(),
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
            write!(f, "; {c}")?;
        }
        if !self.discarded_segments.is_empty() {
            write!(
                f,
                "; segments set aside as .discarded: {}",
                self.discarded_segments.join(", ")
            )?;
        }
        if let Some(v) = self.version_floor {
            write!(
                f,
                "; version floor {v} (versions dropped by a cut are never reused)"
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
    /// The configured durability mode.
    pub mode: Durability,
    /// The data directory.
    pub dir: PathBuf,
    /// Bytes of the log segments on disk.
    pub wal_bytes: u64,
    /// Number of log segments on disk.
    pub wal_segments: usize,
    /// Log records written since the store opened.
    pub wal_records_written: u64,
    /// Log bytes written since the last checkpoint's snapshot (what
    /// `checkpoint_wal_bytes` is compared with).
    pub wal_bytes_since_checkpoint: u64,
    /// Every version up to this is durable (`Always`: fsynced).
    pub durable_version: u64,
    /// fsyncs of the log since the store opened.
    pub fsyncs: u64,
    /// Their durations.
    pub fsync_durations: HistogramSnapshot,
    /// A checkpoint is being written now.
    pub checkpoint_in_progress: bool,
    /// Checkpoints written since the store opened.
    pub checkpoints_ok: u64,
    /// Checkpoints that failed since the store opened.
    pub checkpoints_failed: u64,
    /// The last checkpoint written, if any since the store opened.
    pub last_checkpoint: Option<CheckpointInfo>,
    /// The durations of the checkpoints written since the store opened.
    pub checkpoint_durations: HistogramSnapshot,
    /// Why the last failed checkpoint failed.
    pub last_checkpoint_error: Option<String>,
    /// The checkpoint chain on disk: the base's version and bytes.
    pub base_checkpoint: Option<(u64, u64)>,
    /// Delta runs on disk after the base.
    pub delta_runs: usize,
    /// Bytes of those delta runs.
    pub delta_bytes: u64,
    /// Background merges of a chain into a new base that succeeded.
    pub merges_ok: u64,
    /// Background merges that failed (the chain is left as it was).
    pub merges_failed: u64,
    /// The last merge's new base, if any since the store opened.
    pub last_merge: Option<CheckpointInfo>,
    /// The durations of the merges that succeeded since the store opened.
    pub merge_durations: HistogramSnapshot,
    /// Set once a log failure made the store read-only: the cause.
    pub read_only: Option<String>,
    /// What recovery found and did when the store opened.
    pub recovery: RecoveryReport,
    /// The background executor's task counts.
    pub executor: ExecutorStats,
}
