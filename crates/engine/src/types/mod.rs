//! The engine's shared vocabulary, at the bottom of the crate: the data a
//! store reads and writes ([`Version`], [`Item`], [`ItemView`], [`Range`],
//! [`Write`], [`AtomicWrite`], ...), the request clock, and the duration
//! histogram that times fsyncs, checkpoints and merges. Every layer
//! (`store`, `readexec`, `tree`, `durable`) speaks these types; this module
//! imports none of them (docs/design.md, "Engine layers").

mod clock;
mod histogram;
mod item;
mod range;
mod write;

pub(crate) use clock::Now;
pub use clock::now_ms;
pub use histogram::{DurationHistogram, HistogramSnapshot};
pub use item::{
    Expiry, Flags, Item, ItemView, MemoryUsage, NodeCounts, SnapshotId, SnapshotInfo, Version,
};
pub use range::Range;
pub use write::{AtomicWrite, Write};
