//! The engine's error type. Protocol layers map these to their replies in one
//! place; the `Display` text is what a user reads.

use std::fmt;

/// Everything a store operation can refuse. A refused operation changes nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// Keys are 1 or more bytes.
    KeyEmpty,
    /// The key is longer than the store's `max_key_len`.
    KeyTooLong { len: usize, max: usize },
    /// The value is longer than the store's `max_value_len`.
    ValueTooLarge { len: usize, max: usize },
    /// INCR/DECR on a value that is not a decimal 64-bit integer.
    NotAnInteger,
    /// INCR/DECR would overflow a signed 64-bit integer.
    Overflow,
    /// The snapshot id is unknown, released or expired.
    NoSuchSnapshot,
    /// `max_snapshots` snapshots are live already.
    TooManySnapshots,
    /// The requested snapshot lifetime exceeds `max_snapshot_age`.
    SnapshotTooLong { max_secs: u64 },
    /// The configuration is not usable; the text says why.
    InvalidConfig(String),
    /// The store refuses writes after a durability failure; the text is the cause.
    ReadOnly(String),
    /// A file operation of the durability layer failed (opening, a
    /// checkpoint); the text says which and why.
    Io(String),
    /// The data directory cannot be recovered without losing acknowledged
    /// writes; the text says what is wrong. Nothing was changed.
    Corrupt(String),
    /// A durability operation on a store without a data directory.
    NotDurable,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::KeyEmpty => write!(f, "empty key"),
            Error::KeyTooLong { max, .. } => write!(f, "key too long (max {max} bytes)"),
            Error::ValueTooLarge { max, .. } => write!(f, "value too large (max {max} bytes)"),
            Error::NotAnInteger => write!(f, "value is not an integer or out of range"),
            Error::Overflow => write!(f, "increment or decrement would overflow"),
            Error::NoSuchSnapshot => write!(f, "no such snapshot"),
            Error::TooManySnapshots => write!(f, "too many snapshots"),
            Error::SnapshotTooLong { max_secs } => {
                write!(
                    f,
                    "snapshot expiry exceeds max-snapshot-seconds ({max_secs})"
                )
            }
            Error::InvalidConfig(why) => write!(f, "invalid configuration: {why}"),
            Error::ReadOnly(cause) => write!(f, "store is read-only: {cause}"),
            Error::Io(why) => write!(f, "I/O error: {why}"),
            Error::Corrupt(why) => write!(f, "data directory is corrupt: {why}"),
            Error::NotDurable => write!(f, "the store has no data directory"),
        }
    }
}

impl std::error::Error for Error {}

/// Shorthand used across the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;
