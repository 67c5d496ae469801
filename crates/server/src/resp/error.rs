//! Every error reply a RESP command can send, built in one place. The texts
//! are Redis 7's where Redis has the condition, and `docs/protocol.md`'s otherwise.

use combkv::Error as StoreError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CmdError {
    /// Wrong argument count for a command (its lowercase name).
    Arity(String),
    Syntax,
    NotInteger,
    /// An engine refusal.
    Store(StoreError),
    /// Above `maxmemory`.
    Oom,
    NoAuth,
    /// A full error line, code included (`ERR ...`, `NOPROTO ...`).
    Other(String),
}

impl From<StoreError> for CmdError {
    fn from(e: StoreError) -> Self {
        CmdError::Store(e)
    }
}

impl CmdError {
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
            CmdError::Other(line) => line.clone(),
        }
    }
}

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
        other => format!("ERR {other}"),
    }
}
