//! The I/O failure every durability error carries: what was being done,
//! and the `std::io::Error` that made it fail.
//!
//! It has a file of its own, below `error.rs`, because the lowest parts of
//! the layer (the directory lock, the file layer) report it while
//! `error.rs` builds the higher errors out of theirs: kept in `error.rs`
//! it would make the lock and the errors import each other.

use std::fmt;
use std::io;
use std::sync::Arc;

/// An I/O operation that failed: what was being done, and the
/// `std::io::Error` (its kind and its own source kept).
#[derive(Debug, Clone)]
pub struct IoError {
    what: String,
    source: Arc<io::Error>,
}

impl IoError {
    /// `source`, which failed while doing `what` (a short description:
    /// "opening the write-ahead log", "checkpoint ckpt-...ckpt").
    pub fn new(what: impl Into<String>, source: io::Error) -> IoError {
        IoError {
            what: what.into(),
            source: Arc::new(source),
        }
    }

    /// A closure for `map_err` that wraps an `io::Error` with `what`.
    pub(crate) fn doing(what: impl Into<String>) -> impl FnOnce(io::Error) -> IoError {
        let what = what.into();
        move |e| IoError::new(what, e)
    }

    /// What was being done.
    pub fn what(&self) -> &str {
        &self.what
    }

    /// The kind of the underlying I/O error.
    pub fn kind(&self) -> io::ErrorKind {
        self.source.kind()
    }

    /// The underlying I/O error.
    pub fn io_error(&self) -> &io::Error {
        &self.source
    }
}

impl fmt::Display for IoError {
    /// `<what>: <the I/O error>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.source)
    }
}

impl std::error::Error for IoError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// Equal when they describe the same failure: the same operation, error
/// kind and message (`io::Error` itself has no equality).
impl PartialEq for IoError {
    fn eq(&self, other: &IoError) -> bool {
        Arc::ptr_eq(&self.source, &other.source)
            || (self.what == other.what
                && self.source.kind() == other.source.kind()
                && self.source.to_string() == other.source.to_string())
    }
}

impl Eq for IoError {}
