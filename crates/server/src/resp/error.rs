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
            CmdError::Store(e) => match e {
                StoreError::NotAnInteger => "ERR value is not an integer or out of range".into(),
                StoreError::Overflow => "ERR increment or decrement would overflow".into(),
                // The rest read as `docs/protocol.md` gives them ("key too long
                // (max N bytes)", "no such snapshot", "store is read-only: ...").
                other => format!("ERR {other}"),
            },
            CmdError::Oom => "OOM command not allowed when used memory > 'maxmemory'.".into(),
            CmdError::NoAuth => "NOAUTH Authentication required.".into(),
            CmdError::Other(line) => line.clone(),
        }
    }
}

pub(crate) type CmdResult = Result<(), CmdError>;
