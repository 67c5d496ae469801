//! Every error line the memcached listener sends, built in one place: a
//! request is answered by an [`McError`], an engine refusal
//! ([`combkv::Error`]) is mapped to one by `From` below and nowhere else,
//! and [`McError::line`] is its text. The texts are memcached 1.6's
//! (`proto_text.c`), except where `docs/protocol.md` names its own
//! (`CLIENT_ERROR key too long`); docs/protocol.md lists the differences.

use std::borrow::Cow;

use combkv::Error as StoreError;

/// Why a memcached request was refused (or, for [`McError::LineTooLong`],
/// why its connection closes); the reply is [`McError::line`] and `\r\n`.
/// Public to the fuzz entry points (`memcache_fuzzing`), which see it in
/// the parser's results; new conditions may be added.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum McError {
    /// Unknown command, or a known one with the wrong number of tokens.
    UnknownCommand,
    /// A malformed argument (`CLIENT_ERROR bad command line format`).
    BadFormat,
    /// `delete` with arguments memcached does not take.
    DeleteUsage,
    /// Key longer than the memcached limit (250) or the store's.
    KeyTooLong,
    /// Value longer than `max-value-len` (or the request past `max-request-bytes`).
    TooLarge,
    /// The data block did not end with `\r\n`.
    BadDataChunk,
    /// An exptime (or flush_all delay) that is no 32-bit integer.
    InvalidExptime,
    /// `incr`/`decr` delta not a 64-bit unsigned decimal.
    InvalidDelta,
    /// incr/decr/ma of a value that is no 64-bit unsigned decimal (or a
    /// signed overflow, which memcached's numbers cannot reach).
    NonNumeric,
    /// Above `maxmemory`: a storage command.
    OutOfMemoryStoring,
    /// Above `maxmemory`: incr/decr/ma.
    OutOfMemory,
    /// The node is still loading its dataset (or catching up with its
    /// cluster); the client may retry.
    Loading,
    /// A command line without a newline past the line limit: the
    /// connection is closed after this line.
    LineTooLong,
    // Meta command flag errors, memcached's texts.
    /// A flag given twice.
    DuplicateFlag,
    /// A flag the command does not take (or that combkv does not serve).
    InvalidFlag,
    /// A flag's numeric token does not parse.
    BadToken,
    /// A `b` key that is not valid base64.
    KeyDecode,
    /// An `O` token longer than 32 bytes.
    OpaqueTooLong,
    /// More than 17 flags on `mg` (memcached's wording differs by command).
    MgFlagsTooLong,
    FlagsTooLong,
    /// md/ma: any flag error.
    InvalidOrDuplicateFlag,
    // Authentication (memcached's `-Y`), memcached's texts.
    /// Any command before the authenticating `set`.
    Unauthenticated,
    /// The authenticating `set` names no user and password.
    AuthFormat,
    /// The authenticating `set`'s data did not end with `\r\n`.
    AuthTermination,
    /// Wrong user or password.
    AuthFailure,
    /// The user may not run this request, or not on its key (ACL).
    NoPermission,
    /// An `M` token that is not one character.
    MTokenLength,
    /// An `M` mode ms does not have.
    MsMode,
    /// An `M` mode ma does not have.
    MaMode,
    /// ma's `J` is no 64-bit unsigned decimal.
    InitialValue,
    /// ma's `D` is no 64-bit unsigned decimal.
    MetaDelta,
    /// A command with too few tokens (`stats cachedump`).
    BadCommandLine,
    /// `stats cachedump` of a class past memcached's last.
    IllegalSlabId,
    /// An engine refusal that has no memcached equivalent.
    Store(StoreError),
}

/// The one mapping of engine refusals to memcached replies.
impl From<StoreError> for McError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::KeyEmpty | StoreError::KeyTooLong { .. } => McError::KeyTooLong,
            StoreError::ValueTooLarge { .. } => McError::TooLarge,
            StoreError::NotAnInteger | StoreError::Overflow => McError::NonNumeric,
            // The range's leader is above its memory limit: memcached's
            // words for a store it has no room for.
            StoreError::NoMemory => McError::OutOfMemoryStoring,
            other => McError::Store(other),
        }
    }
}

impl McError {
    /// The reply line, without `\r\n`.
    pub fn line(&self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            McError::UnknownCommand => "ERROR",
            McError::BadFormat => "CLIENT_ERROR bad command line format",
            McError::DeleteUsage => {
                "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"
            }
            McError::KeyTooLong => "CLIENT_ERROR key too long",
            McError::TooLarge => "SERVER_ERROR object too large for cache",
            McError::BadDataChunk => "CLIENT_ERROR bad data chunk",
            McError::InvalidExptime => "CLIENT_ERROR invalid exptime argument",
            McError::InvalidDelta => "CLIENT_ERROR invalid numeric delta argument",
            McError::NonNumeric => "CLIENT_ERROR cannot increment or decrement non-numeric value",
            McError::OutOfMemoryStoring => "SERVER_ERROR out of memory storing object",
            McError::OutOfMemory => "SERVER_ERROR out of memory",
            McError::Loading => "SERVER_ERROR loading the dataset; try again later",
            McError::LineTooLong => "CLIENT_ERROR line too long",
            McError::DuplicateFlag => "CLIENT_ERROR duplicate flag",
            McError::InvalidFlag => "CLIENT_ERROR invalid flag",
            McError::BadToken => "CLIENT_ERROR bad token in command line format",
            McError::KeyDecode => "CLIENT_ERROR error decoding key",
            McError::OpaqueTooLong => "CLIENT_ERROR opaque token too long",
            McError::MgFlagsTooLong => "CLIENT_ERROR options flags are too long",
            McError::FlagsTooLong => "CLIENT_ERROR options flags too long",
            McError::InvalidOrDuplicateFlag => "CLIENT_ERROR invalid or duplicate flag",
            McError::Unauthenticated => "CLIENT_ERROR unauthenticated",
            McError::AuthFormat => "CLIENT_ERROR bad authentication token format",
            McError::AuthTermination => "CLIENT_ERROR bad command line termination",
            McError::AuthFailure => "CLIENT_ERROR authentication failure",
            McError::NoPermission => {
                "CLIENT_ERROR NOPERM this user has no permissions to run this command on its keys"
            }
            McError::MTokenLength => "CLIENT_ERROR incorrect length for M token",
            McError::MsMode => "CLIENT_ERROR invalid mode for ms M token",
            McError::MaMode => "CLIENT_ERROR invalid mode for ma M token",
            McError::InitialValue => "CLIENT_ERROR invalid numeric initial value",
            McError::MetaDelta => "CLIENT_ERROR invalid numeric delta value",
            McError::BadCommandLine => "CLIENT_ERROR bad command line",
            McError::IllegalSlabId => "CLIENT_ERROR Illegal slab id",
            McError::Store(e) => {
                return Cow::Owned(format!("SERVER_ERROR {}", store_error_text(e)));
            }
        })
    }
}

/// The text of a `SERVER_ERROR` for an engine refusal memcached has no
/// reply of its own for (`docs/protocol.md`). The engine's own `Display`
/// texts are not protocol wording; each variant is worded here.
pub(crate) fn store_error_text(e: &StoreError) -> String {
    match e {
        StoreError::KeyEmpty => "empty key".into(),
        StoreError::KeyTooLong { max, .. } => format!("key too long (max {max} bytes)"),
        StoreError::ValueTooLarge { max, .. } => format!("value too large (max {max} bytes)"),
        StoreError::NotAnInteger => "value is not an integer or out of range".into(),
        StoreError::Overflow => "increment or decrement would overflow".into(),
        StoreError::NoSuchSnapshot => "no such snapshot".into(),
        StoreError::TooManySnapshots => "too many snapshots".into(),
        StoreError::SnapshotTooLong { max_secs } => {
            format!("snapshot expiry exceeds max-snapshot-seconds ({max_secs})")
        }
        StoreError::InvalidConfig(why) => format!("invalid configuration: {why}"),
        StoreError::ReadOnly(cause) => format!("store is read-only: {cause}"),
        StoreError::Io(e) => format!("I/O error: {e}"),
        StoreError::Checkpoint(e) => format!("I/O error: {e}"),
        StoreError::Corrupt(why) => format!("data directory is corrupt: {why}"),
        StoreError::NotDurable => "the store has no data directory".into(),
        StoreError::Unavailable(why) => format!("cluster unavailable: {why}"),
        StoreError::Uncertain(why) => {
            format!("the write may or may not have been applied: {why}")
        }
        other => other.to_string(),
    }
}

impl std::fmt::Display for McError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.line())
    }
}
