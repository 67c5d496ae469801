//! Benchmark driver for the combkv engine.
//!
//! The YCSB bench of `docs/workloads.md` (`combkv-bench`): [`record`] (keys and
//! values of any size, carrying an update counter), [`generator`] (request
//! distributions), [`workload`] (operation mixes), [`model`] (what each read
//! may return), [`ops`] (one checked operation), [`ycsb`] (one measurement:
//! load, then run), [`bench`] (every pair in a child process, via
//! [`child`]), [`results`] and [`plot`] (tables, JSON lines, SVG).
//!
//! The targets: [`target`] (the engine and its in-process peers behind one
//! trait) and [`net`] (combkv, Redis and memcached servers over loopback,
//! through pipelining RESP and memcached clients). The older `engine-figures` binary uses [`keys`], [`runner`] and
//! [`report`].

use std::fmt;

pub mod bench;
pub mod child;
pub mod generator;
pub mod keys;
pub mod model;
pub mod net;
pub mod ops;
pub mod plot;
pub mod record;
pub mod report;
pub mod results;
pub mod runner;
pub mod target;
pub mod workload;
pub mod ycsb;

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
