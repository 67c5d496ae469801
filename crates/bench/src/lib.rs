//! Benchmark driver for the combkv engine.
//!
//! The pieces: [`keys`] (the record keys and values of WORKLOADS.md),
//! [`target`] (the engine and its in-memory peers behind one trait),
//! [`runner`] (threads, timing, checking) and [`report`] (results). The
//! `engine-figures` binary puts them together.

use std::fmt;

pub mod keys;
pub mod report;
pub mod runner;
pub mod target;

/// A failed measurement: a target error or a wrong answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchError(pub String);

impl BenchError {
    /// An error with the given message.
    pub fn new(msg: impl Into<String>) -> Self {
        BenchError(msg.into())
    }
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BenchError {}

/// Result with [`BenchError`].
pub type Result<T> = std::result::Result<T, BenchError>;
