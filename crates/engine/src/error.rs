//! The engine's public error type. Each layer below reports its own
//! errors (`durable`: `WalError`, `CheckpointError`, `RecoveryError`, over
//! `IoError`; the configuration: `ConfigError`); the store maps them here.
//!
//! The `Display` texts say what happened in neutral words. A protocol
//! layer maps each variant to its own reply wording in one place (the
//! server's `resp/error.rs` and `memcache/error.rs`).

use std::fmt;

use crate::config::ConfigError;
use crate::durable::{CheckpointError, DirInUse, IoError, RecoveryError, WalError};

/// Everything a store operation can refuse. A refused operation changes nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// Keys are 1 or more bytes.
    KeyEmpty,
    /// The key is longer than the store's `max_key_len`.
    KeyTooLong {
        /// The key's length in bytes.
        len: usize,
        /// The longest key the store takes.
        max: usize,
    },
    /// The value is longer than the store's `max_value_len`.
    ValueTooLarge {
        /// The value's length in bytes.
        len: usize,
        /// The longest value the store takes.
        max: usize,
    },
    /// INCR/DECR on a value that is not a decimal 64-bit integer.
    NotAnInteger,
    /// INCR/DECR would overflow a signed 64-bit integer.
    Overflow,
    /// INCRBYFLOAT on a value, or by an increment, that is not a float.
    NotAFloat,
    /// INCRBYFLOAT's result would be infinite.
    NotFinite,
    /// The snapshot id is unknown, released or expired.
    NoSuchSnapshot,
    /// `max_snapshots` snapshots are live already.
    TooManySnapshots,
    /// The requested snapshot lifetime exceeds `max_snapshot_age`.
    SnapshotTooLong {
        /// The longest lifetime allowed, in seconds.
        max_secs: u64,
    },
    /// The configuration is not usable; the text says why.
    InvalidConfig(String),
    /// The store refuses writes after a durability failure or a shutdown;
    /// the log's error says which (and its `source()` is the I/O error).
    ReadOnly(WalError),
    /// A file operation of the durability layer failed (opening the data
    /// directory, a checkpoint): what was being done, and the I/O error
    /// (its kind kept; `source()` returns it).
    Io(IoError),
    /// The data directory cannot be recovered without losing acknowledged
    /// writes; the text says what is wrong. Nothing was changed.
    Corrupt(String),
    /// Another process holds the data directory's lock: a server, or
    /// `combkv check --repair`, runs on it. Nothing was read or changed.
    InUse(DirInUse),
    /// A durability operation on a store without a data directory.
    NotDurable,
    /// A checkpoint failed for another reason than an I/O error.
    Checkpoint(CheckpointError),
    /// The write was not taken: whoever must order it (a replicated
    /// store's leader and quorum) could not be reached. Nothing changed; it
    /// may be sent again.
    Unavailable(String),
    /// The write's answer was lost: it may or may not have been applied.
    Uncertain(String),
    /// The op's keys lie outside the part of the keyspace this store
    /// serves (a range split since the op was routed to it). Nothing
    /// changed; route it again.
    WrongRange(String),
    /// The op's keys lie in more than one range of a keyspace cut into
    /// ranges (each ordered by a group of its own, none of which can apply
    /// it whole). Nothing changed. Redis Cluster's `CROSSSLOT`.
    CrossRange,
    /// The op can add data and the node that orders it (a replicated
    /// range's leader) is above its memory limit. Nothing changed. Redis's
    /// `OOM` reply.
    NoMemory,
    /// The op cannot run where it was asked to: a FLUSHALL inside a
    /// transaction ([`crate::op::Op::Txn`]), a read op outside one. The
    /// text says which.
    NotInTransaction(String),
}

impl Error {
    /// The operation was refused for what it asked, before it changed
    /// anything, and the store goes on as before: a bad key, value or
    /// number. A transaction reports such an error for its op and applies
    /// the rest (as Redis's EXEC does); any other error ends it.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Error::KeyEmpty
                | Error::KeyTooLong { .. }
                | Error::ValueTooLarge { .. }
                | Error::NotAnInteger
                | Error::Overflow
                | Error::NotAFloat
                | Error::NotFinite
                | Error::NotInTransaction(_)
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::KeyEmpty => write!(f, "the key is empty"),
            Error::KeyTooLong { len, max } => {
                write!(f, "the key is {len} bytes, over the limit of {max}")
            }
            Error::ValueTooLarge { len, max } => {
                write!(f, "the value is {len} bytes, over the limit of {max}")
            }
            Error::NotAnInteger => write!(f, "the value is not a decimal 64-bit integer"),
            Error::Overflow => write!(f, "the increment would overflow a 64-bit integer"),
            Error::NotAFloat => write!(f, "the value is not a valid float"),
            Error::NotFinite => write!(f, "the increment would produce an infinity"),
            Error::NoSuchSnapshot => write!(f, "no such snapshot (unknown, released or expired)"),
            Error::TooManySnapshots => write!(f, "too many live snapshots"),
            Error::SnapshotTooLong { max_secs } => {
                write!(f, "the snapshot lifetime is over the limit of {max_secs} s")
            }
            Error::InvalidConfig(why) => write!(f, "invalid configuration: {why}"),
            Error::ReadOnly(cause) => write!(f, "store is read-only: {cause}"),
            Error::Io(e) => write!(f, "I/O error: {e}"),
            Error::Corrupt(why) => write!(f, "the data directory is corrupt: {why}"),
            Error::InUse(d) => d.fmt(f),
            Error::NotDurable => write!(f, "the store has no data directory"),
            Error::Checkpoint(e) => write!(f, "the checkpoint failed: {e}"),
            Error::Unavailable(why) => write!(f, "the write was not taken: {why}"),
            Error::WrongRange(why) => write!(f, "{why}"),
            Error::CrossRange => write!(f, "the keys in the request lie in more than one range"),
            Error::NoMemory => write!(
                f,
                "the node that orders the write is above its memory limit (maxmemory)"
            ),
            Error::Uncertain(why) => {
                write!(f, "the write may or may not have been applied: {why}")
            }
            Error::NotInTransaction(why) => write!(f, "not allowed in a transaction: {why}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::ReadOnly(cause) => Some(cause),
            Error::Io(e) => Some(e.io_error()),
            Error::Checkpoint(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Error {
        Error::InvalidConfig(e.to_string())
    }
}

impl From<WalError> for Error {
    fn from(e: WalError) -> Error {
        Error::ReadOnly(e)
    }
}

impl From<IoError> for Error {
    fn from(e: IoError) -> Error {
        Error::Io(e)
    }
}

impl From<CheckpointError> for Error {
    fn from(e: CheckpointError) -> Error {
        match e {
            CheckpointError::Io(e) => Error::Io(e),
            other => Error::Checkpoint(other),
        }
    }
}

impl From<RecoveryError> for Error {
    fn from(e: RecoveryError) -> Error {
        match e {
            RecoveryError::Io(e) => Error::Io(e),
            RecoveryError::InUse(d) => Error::InUse(d),
            other => Error::Corrupt(other.to_string()),
        }
    }
}

/// Shorthand used across the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use std::error::Error as _;
    use std::io;

    use super::*;

    #[test]
    fn an_io_error_keeps_its_kind_its_source_and_what_was_done() {
        let io = io::Error::new(io::ErrorKind::PermissionDenied, "denied");
        let e = Error::from(IoError::new("opening the data directory", io));
        let Error::Io(inner) = &e else {
            panic!("{e:?}")
        };
        assert_eq!(inner.kind(), io::ErrorKind::PermissionDenied);
        assert_eq!(inner.what(), "opening the data directory");
        let source = e.source().and_then(|s| s.downcast_ref::<io::Error>());
        assert_eq!(
            source.map(io::Error::kind),
            Some(io::ErrorKind::PermissionDenied)
        );
        assert_eq!(
            e.to_string(),
            "I/O error: opening the data directory: denied"
        );
        assert_eq!(e.clone(), e);
    }

    #[test]
    fn read_only_carries_the_logs_failure_and_its_io_error() {
        let io = io::Error::new(io::ErrorKind::StorageFull, "no space");
        let e = Error::from(WalError::Write(IoError::new("write-ahead log", io)));
        assert!(matches!(e, Error::ReadOnly(WalError::Write(_))));
        assert_eq!(
            e.to_string(),
            "store is read-only: write-ahead log: no space"
        );
        let wal = e.source().expect("the log's error");
        let io = wal.source().and_then(|s| s.downcast_ref::<io::Error>());
        assert_eq!(io.map(io::Error::kind), Some(io::ErrorKind::StorageFull));
        assert!(Error::ReadOnly(WalError::ShutDown).source().is_some());
    }

    #[test]
    fn the_texts_say_what_happened_without_protocol_wording() {
        for e in [Error::NotAnInteger, Error::Overflow] {
            let text = e.to_string();
            assert!(
                !text.contains("out of range") && !text.contains("decrement"),
                "{text}"
            );
        }
        assert_eq!(
            Error::NotAnInteger.to_string(),
            "the value is not a decimal 64-bit integer"
        );
    }

    #[test]
    fn recovery_refusals_are_corrupt_and_its_io_failures_io() {
        let refused = RecoveryError::MissingRecords {
            segment: "wal-1.log".into(),
            log_start: 9,
            checkpoint: 3,
        };
        assert!(matches!(Error::from(refused), Error::Corrupt(why) if why.contains("missing")));
        let io = RecoveryError::Io(IoError::new("listing", io::Error::other("gone")));
        assert!(matches!(Error::from(io), Error::Io(_)));
    }
}
