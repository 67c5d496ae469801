//! combkv's engine: an in-memory, ordered, multi-version key-value store
//! built on the Honeycomb B+tree (`docs/design.md`). No sockets, no async
//! runtime: the server and the bench sit on top of [`Store`].
//!
//! Keys are 1 to [`Store::max_key_len`] bytes (460 with the default 8 KiB
//! nodes), compared as unsigned bytes; values are 0 to
//! [`Config::max_value_len`] bytes (64 MiB by default). Values longer than
//! the inline limit (469 bytes with 8 KiB nodes) live outside the node.
//!
//! Layers (docs/design.md, "Engine layers"), each importing only those
//! below it: `store` (the public API, with `error`) over `readexec` (the
//! batched read engine) and `durable` (log, checkpoints, recovery), both
//! over `tree` (the Honeycomb B+tree), all over `types`, `config` and
//! `sync`. The durability layer reaches into the tree through one hook,
//! the tree's `VersionLog`.

#![warn(missing_docs)]

mod config;
pub mod durable;
mod error;
pub mod readexec;
mod store;
pub(crate) mod sync;
pub(crate) mod tree;
mod types;

pub use config::Config;
pub use durable::check::CheckReport;
pub use durable::{
    CheckpointInfo, CheckpointKind, Durability, DurableConfig, PersistenceStats, RecoveryProgress,
    RecoveryReport,
};
pub use error::{Error, Result};
pub use store::op;
pub use store::{History, Pin, Session, Store, check, check_key, read_backup};
pub use tree::epoch::flush_reclamation;
pub use tree::footprint::Footprint;
pub use tree::node::{
    ReceivedValue, ValueBuf, ValueOffer, adopted_values_global, live_buffers_global,
    live_external_values_global,
};
pub use types::{
    AtomicWrite, DurationHistogram, Expiry, Flags, HistogramSnapshot, Item, ItemView, MemoryUsage,
    NodeCounts, Range, SnapshotId, SnapshotInfo, Version, Write, now_ms,
};
