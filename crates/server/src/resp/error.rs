//! Every error reply a RESP command can send, built in one place: a
//! command returns a [`CmdError`], and [`CmdError::line`] is the only code
//! that turns one, an engine refusal ([`combkv::Error`]) included, into
//! reply text. The texts are Redis 7's where Redis has the condition, and
//! `docs/protocol.md`'s otherwise. (Framing errors, which close the
//! connection, are `frame::FrameError`.)

use combkv::Error as StoreError;

use crate::node::admin::AdminError;

/// Why a RESP command was refused; its reply is `-` and [`CmdError::line`].
/// An error reply changes nothing in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CmdError {
    /// No reply: the connection closes (a client whose ACL user was
    /// deleted, as Redis closes it).
    Closed,
    /// Wrong argument count for a command (its lowercase name, or
    /// `command|subcommand`): `ERR wrong number of arguments for '...'
    /// command`.
    Arity(String),
    /// An unknown option or a misplaced word: `ERR syntax error`.
    Syntax,
    /// An argument that must be an integer is not one (Redis's strict
    /// syntax): `ERR value is not an integer or out of range`.
    NotInteger,
    /// An engine refusal: a key or value over the limits, a stored value
    /// that is no number, an overflow, an unknown snapshot, a read-only
    /// store. Its text is mapped in [`CmdError::line`] and nowhere else.
    Store(StoreError),
    /// A write that can add data, above `maxmemory`: Redis's OOM reply.
    Oom,
    /// A command other than AUTH, HELLO or QUIT before AUTH (with
    /// `requirepass`).
    NoAuth,
    /// The node is still loading its dataset (or catching up with its
    /// cluster): Redis's `LOADING`, which clients retry.
    Loading,
    /// Any other error: the full line, code included (`ERR ...`,
    /// `NOPROTO ...`, `WRONGPASS ...`).
    Other(String),
}

impl From<StoreError> for CmdError {
    fn from(e: StoreError) -> Self {
        CmdError::Store(e)
    }
}

impl From<AdminError> for CmdError {
    fn from(e: AdminError) -> Self {
        match e {
            AdminError::Refused(why) => CmdError::err(why),
            AdminError::NotABackup(why) => CmdError::err(why),
            AdminError::Store(e) => CmdError::Store(e),
        }
    }
}

impl CmdError {
    /// An `ERR` error with this message.
    pub(crate) fn err(msg: impl Into<String>) -> CmdError {
        CmdError::Other(format!("ERR {}", msg.into()))
    }

    /// The error line without the leading `-`.
    pub(crate) fn line(&self) -> String {
        match self {
            CmdError::Arity(name) => {
                format!("ERR wrong number of arguments for '{name}' command")
            }
            CmdError::Syntax => "ERR syntax error".into(),
            CmdError::NotInteger => "ERR value is not an integer or out of range".into(),
            CmdError::Store(e) => store_error_line(e),
            CmdError::Oom => "OOM command not allowed when used memory > 'maxmemory'.".into(),
            CmdError::NoAuth => "NOAUTH Authentication required.".into(),
            CmdError::Loading => "LOADING combkv is loading the dataset in memory".into(),
            CmdError::Other(line) => line.clone(),
            CmdError::Closed => String::new(),
        }
    }
}

/// What a command handler returns: its reply is written on `Ok`.
pub(crate) type CmdResult = Result<(), CmdError>;

/// The reply to an engine refusal: Redis's text where Redis has the
/// condition, `docs/protocol.md`'s otherwise. The engine's own `Display`
/// texts are not protocol wording; each variant is worded here.
fn store_error_line(e: &StoreError) -> String {
    match e {
        StoreError::KeyEmpty => "ERR empty key".into(),
        StoreError::KeyTooLong { max, .. } => format!("ERR key too long (max {max} bytes)"),
        StoreError::ValueTooLarge { max, .. } => format!("ERR value too large (max {max} bytes)"),
        StoreError::NotAnInteger => "ERR value is not an integer or out of range".into(),
        StoreError::Overflow => "ERR increment or decrement would overflow".into(),
        StoreError::NotAFloat => "ERR value is not a valid float".into(),
        StoreError::NotFinite => "ERR increment would produce NaN or Infinity".into(),
        StoreError::NoSuchSnapshot => "ERR no such snapshot".into(),
        StoreError::TooManySnapshots => "ERR too many snapshots".into(),
        StoreError::SnapshotTooLong { max_secs } => {
            format!("ERR snapshot expiry exceeds max-snapshot-seconds ({max_secs})")
        }
        StoreError::InvalidConfig(why) => format!("ERR invalid configuration: {why}"),
        StoreError::ReadOnly(cause) => format!("ERR store is read-only: {cause}"),
        StoreError::Io(e) => format!("ERR I/O error: {e}"),
        StoreError::Checkpoint(e) => format!("ERR I/O error: {e}"),
        StoreError::Corrupt(why) => format!("ERR data directory is corrupt: {why}"),
        StoreError::NotDurable => "ERR the store has no data directory".into(),
        // Redis Cluster's words for a cluster that cannot serve now.
        StoreError::Unavailable(why) => format!("CLUSTERDOWN {why}"),
        StoreError::Uncertain(why) => {
            format!("ERR the write may or may not have been applied: {why}")
        }
        // Redis Cluster's words for keys of one request in different
        // slots; here, in different ranges.
        StoreError::CrossRange => "CROSSSLOT Keys in request don't hash to the same slot".into(),
        // The node that orders the write (its range's leader) is above its
        // maxmemory: the words Redis answers for its own.
        StoreError::NoMemory => CmdError::Oom.line(),
        other => format!("ERR {other}"),
    }
}
