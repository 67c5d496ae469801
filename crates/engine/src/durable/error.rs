//! The durability layer's errors: one type per part (the log, checkpoints,
//! recovery), each saying what failed and keeping the `std::io::Error` that
//! made it fail, with its kind, as its `source()`.
//!
//! They are `Clone` (an I/O error is kept in an `Arc`): the log records
//! its failure once and hands it to every writer refused afterwards. The
//! store maps them to the public [`crate::Error`].

use std::fmt;
use std::path::PathBuf;

use super::Dropped;
pub use super::io_error::IoError;
use super::lock::{DirInUse, LockError};
pub use super::record::Damage;

/// Why the write-ahead log refuses writes: the cause of a read-only store
/// (`Error::ReadOnly`). Once the log fails it stays failed; every later
/// write is refused with the same error.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WalError {
    /// Writing or syncing the current log segment failed.
    Write(IoError),
    /// Starting the next log segment failed.
    Rotate(IoError),
    /// The store was shut down: nothing more is written.
    ShutDown,
    /// Versions are no longer released, and the log recorded no failure of
    /// its own: an atomic group failed midway, which poisons the clock as
    /// a log failure does.
    Poisoned,
}

impl fmt::Display for WalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalError::Write(e) | WalError::Rotate(e) => e.fmt(f),
            WalError::ShutDown => f.write_str("the store is shut down"),
            WalError::Poisoned => f.write_str("the write-ahead log failed"),
        }
    }
}

impl std::error::Error for WalError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WalError::Write(e) | WalError::Rotate(e) => Some(e.io_error()),
            _ => None,
        }
    }
}

/// Why the reader of a checkpoint refused one of its items.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ItemRefused {
    /// The key is empty or longer than the node size allows.
    KeyLength {
        /// The key's length.
        len: usize,
        /// The longest key the node size allows.
        max: usize,
    },
    /// The key is not above the one before it.
    OutOfOrder,
    /// The item has version 0 (versions start at 1).
    ZeroVersion,
    /// The value is longer than the store's `max_value_len`.
    ValueTooLarge {
        /// The value's length.
        len: usize,
    },
    /// The item's version is above the checkpoint's own.
    VersionAbove {
        /// The item's version.
        version: u64,
    },
}

impl fmt::Display for ItemRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ItemRefused::KeyLength { len, max } => {
                write!(f, "key of {len} bytes outside 1..={max}")
            }
            ItemRefused::OutOfOrder => f.write_str("keys out of order"),
            ItemRefused::ZeroVersion => f.write_str("version 0"),
            ItemRefused::ValueTooLarge { len } => {
                write!(f, "value of {len} bytes over the limit")
            }
            ItemRefused::VersionAbove { version } => {
                write!(f, "item version {version} above the checkpoint's")
            }
        }
    }
}

impl std::error::Error for ItemRefused {}

/// Why a checkpoint could not be written, or a checkpoint file is not
/// valid (recovery then falls back to an older one).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CheckpointError {
    /// A file operation failed.
    Io(IoError),
    /// The file ends inside its header, a block or its footer.
    Truncated,
    /// The header is damaged.
    Header(Damage),
    /// The block at this offset is damaged.
    Block {
        /// The block's offset in the file.
        offset: u64,
        /// What is wrong with it.
        damage: Damage,
    },
    /// The footer at this offset is damaged.
    Footer {
        /// The footer's offset in the file.
        offset: u64,
        /// What is wrong with it.
        damage: Damage,
    },
    /// The footer's item count is not the number of items in the blocks.
    ItemCount {
        /// The count the footer records.
        footer: u64,
        /// The items the blocks hold.
        blocks: u64,
    },
    /// Bytes follow the footer.
    TrailingBytes,
    /// The header names another version than the file name.
    VersionMismatch {
        /// The version the header names.
        header: u64,
    },
    /// Item `index` was refused by its reader.
    Item {
        /// The item's position in the file, from 0.
        index: u64,
        /// Why it was refused.
        refused: ItemRefused,
    },
    /// The log could not be made durable through the versions a base
    /// written at advancing versions holds.
    Log(WalError),
    /// The store was dropped before the checkpoint ran.
    StoreGone,
    /// The checkpoint task was dropped without running (the store shut
    /// down meanwhile).
    TaskDropped,
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckpointError::Io(e) => e.fmt(f),
            CheckpointError::Truncated => Damage::Torn.fmt(f),
            CheckpointError::Header(d) => write!(f, "header {d}"),
            CheckpointError::Block { offset, damage } => write!(f, "block at {offset}: {damage}"),
            CheckpointError::Footer { offset, damage } => {
                write!(f, "footer at {offset}: {damage}")
            }
            CheckpointError::ItemCount { footer, blocks } => {
                write!(f, "footer says {footer} items, blocks hold {blocks}")
            }
            CheckpointError::TrailingBytes => f.write_str("bytes after the footer"),
            CheckpointError::VersionMismatch { header } => {
                write!(f, "header says version {header}")
            }
            CheckpointError::Item { index, refused } => write!(f, "item {index}: {refused}"),
            CheckpointError::Log(e) => write!(f, "syncing the log: {e}"),
            CheckpointError::StoreGone => f.write_str("the store is gone"),
            CheckpointError::TaskDropped => f.write_str("the checkpoint task was dropped"),
        }
    }
}

impl std::error::Error for CheckpointError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CheckpointError::Io(e) => Some(e.io_error()),
            CheckpointError::Item { refused, .. } => Some(refused),
            _ => None,
        }
    }
}

impl From<IoError> for CheckpointError {
    fn from(e: IoError) -> CheckpointError {
        CheckpointError::Io(e)
    }
}

/// Why a log record could not be replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordRefused {
    /// The key is empty or longer than the node size allows.
    KeyLength {
        /// The key's length.
        len: usize,
        /// The longest key the node size allows.
        max: usize,
    },
    /// The value is longer than the store's `max_value_len`.
    ValueTooLarge {
        /// The value's length.
        len: usize,
    },
}

impl fmt::Display for RecordRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordRefused::KeyLength { len, max } => {
                write!(f, "key of {len} bytes outside 1..={max}")
            }
            RecordRefused::ValueTooLarge { len } => {
                write!(f, "value of {len} bytes over the limit")
            }
        }
    }
}

impl std::error::Error for RecordRefused {}

/// Why a data directory could not be opened. Except for `Io`, recovery
/// refuses the directory rather than lose acknowledged writes, and changes
/// nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecoveryError {
    /// A file operation failed.
    Io(IoError),
    /// The log starts after the newest valid checkpoint: the records in
    /// between are missing.
    MissingRecords {
        /// The log's first segment.
        segment: String,
        /// The start version its header records.
        log_start: u64,
        /// The version of the newest valid checkpoint (with its runs).
        checkpoint: u64,
    },
    /// A whole record (its checksum holds) of a kind this version does not
    /// know: written by a newer combkv.
    UnknownRecordKind {
        /// The segment holding the record.
        segment: String,
        /// The record's offset in it.
        offset: u64,
        /// The unknown kind byte.
        kind: u8,
    },
    /// A valid record that cannot be applied.
    BadRecord {
        /// The segment holding the record.
        segment: String,
        /// The record's version.
        version: u64,
        /// Why it cannot be applied.
        refused: RecordRefused,
    },
    /// The log is damaged where a crash cannot have torn it: well-formed
    /// records follow the damage in its segment, or later segments follow
    /// it (a segment is synced before the next one is started). Cutting
    /// there would drop what follows, acknowledged writes among it.
    /// Nothing was changed; `DurableConfig::truncate_corrupt` (`combkv
    /// serve --wal-truncate-corrupt`) or `combkv check --repair` cut it.
    CorruptLog(Box<CorruptLog>),
    /// The `version-floor` file is damaged: the floor a cut set is unknown,
    /// and starting without it could reuse versions handed out before.
    VersionFloor {
        /// The floor file's name.
        file: String,
        /// What is wrong with it.
        damage: Damage,
    },
    /// Another process holds the directory's lock (a server, or a repair,
    /// runs on it). Nothing was read or changed.
    InUse(DirInUse),
}

impl fmt::Display for RecoveryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecoveryError::Io(e) => e.fmt(f),
            RecoveryError::MissingRecords {
                segment,
                log_start,
                checkpoint,
            } => write!(
                f,
                "the log starts at version {log_start} ({segment}) but the newest valid checkpoint is at version {checkpoint}: records in between are missing"
            ),
            RecoveryError::UnknownRecordKind {
                segment,
                offset,
                kind,
            } => write!(
                f,
                "{segment}: offset {offset}: {}; nothing was changed: open the directory with the version that wrote it",
                Damage::UnknownKind(*kind)
            ),
            RecoveryError::BadRecord {
                segment,
                version,
                refused,
            } => write!(f, "{segment}: record {version}: {refused}"),
            RecoveryError::CorruptLog(c) => c.fmt(f),
            RecoveryError::VersionFloor { file, damage } => write!(
                f,
                "{file}: {damage}; it holds the version floor a cut of the log set (versions up to \
                 it were handed out by the data the cut dropped). Nothing was changed. Restore it \
                 from a backup; removing it lets the store start, but new writes may then reuse \
                 versions (CAS tokens) that clients saw before the cut"
            ),
            RecoveryError::InUse(d) => d.fmt(f),
        }
    }
}

impl std::error::Error for RecoveryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RecoveryError::Io(e) => Some(e.io_error()),
            RecoveryError::BadRecord { refused, .. } => Some(refused),
            _ => None,
        }
    }
}

impl From<IoError> for RecoveryError {
    fn from(e: IoError) -> RecoveryError {
        RecoveryError::Io(e)
    }
}

impl From<LockError> for RecoveryError {
    fn from(e: LockError) -> RecoveryError {
        match e {
            LockError::InUse(d) => RecoveryError::InUse(d),
            LockError::Io(e) => RecoveryError::Io(e),
        }
    }
}

/// Where a log is corrupt and what cutting it would drop
/// (`RecoveryError::CorruptLog`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorruptLog {
    /// The data directory.
    pub dir: PathBuf,
    /// The segment, and the offset of the first record that does not decode.
    pub segment: String,
    /// The offset of that record in the segment.
    pub offset: u64,
    /// What is wrong with the record there.
    pub damage: Damage,
    /// What a cut would drop.
    pub dropped: Dropped,
}

impl fmt::Display for CorruptLog {
    /// The file, the offset, what follows, and the ways out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: offset {}: {}, and the log goes on after it, so this is corruption, not a torn tail; \
             cutting the log would drop {}. Nothing was changed. \
             Restore the directory from a backup, or accept the loss and cut the log there: \
             offline with `combkv check --repair --data-dir {}`, or by starting with \
             --wal-truncate-corrupt (DurableConfig::truncate_corrupt); \
             either keeps what it drops as .discarded files and restarts versions above it",
            self.dir.join(&self.segment).display(),
            self.offset,
            self.damage,
            self.dropped,
            self.dir.display()
        )
    }
}

/// A durability mode name that is not one (`Durability::from_str`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseDurabilityError {
    input: String,
}

impl ParseDurabilityError {
    pub(crate) fn new(input: &str) -> ParseDurabilityError {
        ParseDurabilityError {
            input: input.to_string(),
        }
    }
}

impl fmt::Display for ParseDurabilityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown durability {:?} (always, everysec, none)",
            self.input
        )
    }
}

impl std::error::Error for ParseDurabilityError {}

impl From<crate::tree::load::LoadError> for ItemRefused {
    fn from(e: crate::tree::load::LoadError) -> ItemRefused {
        use crate::tree::load::LoadError;
        match e {
            LoadError::KeyLength { len, max } => ItemRefused::KeyLength { len, max },
            LoadError::OutOfOrder => ItemRefused::OutOfOrder,
            LoadError::ZeroVersion => ItemRefused::ZeroVersion,
        }
    }
}
