//! The public store API: what the server, the bench and embedders call.
//! A thin layer over the engine's parts: it checks arguments against the
//! limits, takes the read version, and hands the work to the tree
//! (`crate::tree`), the read engine (`crate::readexec`) and, for a durable
//! store, the durability layer (`crate::durable`), then acknowledges writes
//! (docs/design.md, "Engine layers").
//!
//! - `read`: point reads, ranges, floor/ceil, read-engine batches
//! - `write`: every write and its acknowledgement; atomic groups, clear,
//!   the TTL sweep
//! - `session`: writes acknowledged together at `Session::commit`
//! - `snapshot`: pinned read versions and reads at them
//! - `op`: decided writes as data (`combkv::op`)

mod backup;
mod history;
pub mod op;
mod read;
mod replica;
mod session;
mod snapshot;
mod write;

use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{Config, Geometry};
use crate::durable::check::CheckReport;
use crate::durable::runtime::{Durable, SaveError};
use crate::durable::{CheckpointInfo, DurableConfig, PersistenceStats, RecoveryReport};
use crate::error::{Error, Result};
use crate::readexec::{CpuBackend, ReadBackend};
use crate::tree::Tree;
use crate::tree::epoch;
use crate::types::{MemoryUsage, NodeCounts, Now, Range, Version};
pub use backup::read_backup;
pub use history::History;
pub use session::Session;
pub use snapshot::Pin;
use write::Ack;

/// An in-memory, ordered, multi-version key-value store.
///
/// Reads never lock, wait or retry; every read (and every range) sees one
/// consistent version of the store. Writes are linearizable and return once
/// visible to every read that starts after them.
///
/// ```
/// use std::ops::Bound;
/// use combkv::{Config, Expiry, Range, Store};
///
/// let store = Store::new(Config::default()).unwrap();
/// let v1 = store.put(b"apple", b"red").unwrap();
/// store.put(b"banana", b"yellow").unwrap();
/// assert_eq!(store.get(b"apple").unwrap().unwrap(), &b"red"[..]);
///
/// // Compare-and-swap on the item version.
/// assert!(store.cas(b"apple", v1.get(), b"green", Expiry::Keep).unwrap().is_some());
/// assert!(store.cas(b"apple", v1.get(), b"blue", Expiry::Keep).unwrap().is_none());
///
/// // A snapshot keeps seeing the store as it was.
/// let snap = store.snapshot(std::time::Duration::from_secs(10)).unwrap();
/// store.delete(b"banana").unwrap();
/// assert!(store.get(b"banana").unwrap().is_none());
/// assert!(store.get_at(snap, b"banana").unwrap().is_some());
/// store.release_snapshot(snap);
///
/// // Ordered ranges.
/// let items = store.range(&Range::new(Bound::Included(b"a".to_vec()), Bound::Unbounded)).unwrap();
/// assert_eq!(items.len(), 1);
/// assert_eq!(items[0].value, &b"green"[..]);
/// ```
#[derive(Debug)]
pub struct Store {
    /// Unique in the process: hot caches tell stores apart by it.
    id: u64,
    tree: Arc<Tree>,
    config: Config,
    geometry: Geometry,
    /// Where the next `sweep_expired` call resumes.
    sweep_cursor: parking_lot::Mutex<Option<Vec<u8>>>,
    /// The read engine's backend.
    backend: Box<dyn ReadBackend>,
    /// Log, checkpoints and background work of a store opened with `open`.
    durable: Option<Durable>,
    /// Transactions (`op::Op::Txn`) hold it exclusively; every other write
    /// holds it shared while it writes, so a transaction's ops see no
    /// other writer between them. Sharded: the shared side, on every
    /// write, touches a line of its thread's own.
    txn_lock: crate::sync::TxnLock,
    /// An in-memory store's clear lock (a durable store's is its
    /// checkpoints'): a backup never takes its version inside a clear.
    clear_lock: parking_lot::Mutex<()>,
}

/// A new store id (never 0, which a fresh hot cache holds).
fn next_store_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Drop for Store {
    fn drop(&mut self) {
        // A failure here is already recorded (the store was read-only).
        let _ = self.shutdown();
    }
}

impl Store {
    /// Creates an empty store.
    pub fn new(config: Config) -> Result<Store> {
        let geometry = config.validate()?;
        Ok(Store::with_tree(config, geometry, Tree::new(geometry)))
    }

    /// An in-memory store around `tree`.
    pub(super) fn with_tree(config: Config, geometry: Geometry, tree: Tree) -> Store {
        Store {
            tree: Arc::new(tree),
            config,
            geometry,
            sweep_cursor: Default::default(),
            txn_lock: Default::default(),
            clear_lock: Default::default(),
            id: next_store_id(),
            backend: Box::new(CpuBackend::default()),
            durable: None,
        }
    }

    /// Longest key accepted: 460 bytes with nodes of 8 KiB and more.
    pub fn max_key_len(&self) -> usize {
        self.geometry.max_key_len
    }

    /// Longest value accepted (`Config::max_value_len`).
    pub fn max_value_len(&self) -> usize {
        self.config.max_value_len
    }

    /// The configuration the store was built with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    pub(super) fn check_key(&self, key: &[u8]) -> Result<()> {
        check_key(key, self.geometry.max_key_len)
    }

    pub(super) fn check_value(&self, len: usize) -> Result<()> {
        if len > self.config.max_value_len {
            return Err(Error::ValueTooLarge {
                len,
                max: self.config.max_value_len,
            });
        }
        Ok(())
    }

    /// Keys stored, counted as writes create and delete them (O(1)). Keys
    /// that have expired count until the background sweep removes them, as
    /// Redis's DBSIZE counts them; exact once writers are quiescent.
    pub fn len(&self) -> u64 {
        self.tree.key_count()
    }

    /// True when no key is stored (see [`Store::len`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The read version: every read that starts now sees exactly the writes
    /// with versions up to it.
    pub fn read_version(&self) -> Version {
        Version(self.tree.read_version())
    }

    pub(super) fn check_range(&self, r: &Range) -> Result<()> {
        for b in [&r.start, &r.end] {
            if let Bound::Included(k) | Bound::Excluded(k) = b
                && k.len() > self.geometry.max_key_len
            {
                return Err(Error::KeyTooLong {
                    len: k.len(),
                    max: self.geometry.max_key_len,
                });
            }
        }
        Ok(())
    }

    /// The tree, for the engine's own layout tests.
    #[cfg(test)]
    pub(crate) fn tree(&self) -> &Tree {
        &self.tree
    }

    pub(super) fn read<T>(&self, f: impl FnOnce(u64, &Now) -> T) -> T {
        // Pin before taking the read version: see tree::reclaim.
        let guard = self.tree.pin();
        let rv = self.tree.read_version();
        let out = f(rv, &Now::lazy());
        drop(guard);
        out
    }

    // ---- durability ------------------------------------------------------

    /// Opens (or creates) a durable store in `durable.dir`: loads the newest
    /// valid checkpoint, replays the log after it, and starts the log
    /// flusher and the background executor. `Store::new` stays in-memory.
    pub fn open(config: Config, durable: DurableConfig) -> Result<(Store, RecoveryReport)> {
        let geometry = config.validate()?;
        let (tree, d) = Durable::open(&geometry, config.max_value_len, durable)?;
        let report = d.report().clone();
        let store = Store {
            tree,
            config,
            geometry,
            sweep_cursor: Default::default(),
            txn_lock: Default::default(),
            clear_lock: Default::default(),
            id: next_store_id(),
            backend: Box::new(CpuBackend::default()),
            durable: Some(d),
        };
        Ok((store, report))
    }

    /// The durable runtime, for the durability layer's own tests.
    #[cfg(test)]
    pub(crate) fn durable_for_tests(&self) -> Option<&Durable> {
        self.durable.as_ref()
    }

    /// SAVE: writes a checkpoint now (on the background executor) and waits
    /// for it. Writers keep going meanwhile.
    pub fn checkpoint(&self) -> Result<CheckpointInfo> {
        let d = self.durable.as_ref().ok_or(Error::NotDurable)?;
        d.checkpoint().map_err(|e| match e {
            SaveError::ReadOnly(cause) => Error::ReadOnly(cause),
            SaveError::Failed(e) => Error::from(e),
        })
    }

    /// BGSAVE: starts a checkpoint in the background. False if one is
    /// already queued or running.
    pub fn checkpoint_in_background(&self) -> Result<bool> {
        let d = self.durable.as_ref().ok_or(Error::NotDurable)?;
        Ok(d.checkpoint_in_background()?)
    }

    /// Switches a durable store's durability mode while it serves: to
    /// `Always`, once everything written before is fsynced (see
    /// `durable::Durability` for what each mode promises). Every mode
    /// writes the same log, so any switch is safe; an in-memory store has
    /// none (`Error::NotDurable`).
    pub fn set_durability(&self, mode: crate::durable::Durability) -> Result<()> {
        let d = self.durable.as_ref().ok_or(Error::NotDurable)?;
        Ok(d.set_mode(mode)?)
    }

    /// Durability figures (INFO persistence). `enabled` is false for an
    /// in-memory store.
    pub fn persistence(&self) -> PersistenceStats {
        self.durable
            .as_ref()
            .map_or_else(PersistenceStats::default, |d| d.stats())
    }

    /// Clean shutdown: finishes queued background work, writes and fsyncs
    /// the log, stops the background threads. Writes are refused afterwards
    /// (`Error::ReadOnly`). Idempotent; dropping the store does it too.
    pub fn shutdown(&self) -> Result<()> {
        match &self.durable {
            Some(d) => Ok(d.shutdown()?),
            None => Ok(()),
        }
    }

    // ---- introspection ---------------------------------------------------

    /// Runs pending reclamation work now: frees what no reader or snapshot
    /// can reach any more. Writers do this on their own every few hundred
    /// writes; tests and shutdown call it to reach a quiescent state.
    ///
    /// The epoch is process-wide, so other threads' pins can delay the grace
    /// periods; this keeps pushing until this store's deferred work has run,
    /// for at most two seconds.
    pub fn collect(&self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            epoch::flush_reclamation();
            self.tree.flush_epochs();
            self.tree.collect(true);
            if self.tree.drained() || Instant::now() >= deadline {
                return;
            }
            std::thread::yield_now();
        }
    }

    /// One pass of reclamation, without waiting: retires what released
    /// writes replaced, unlinks what no reader can reach any more, and lets
    /// the epoch run the frees whose grace has passed. Writers do this every
    /// few hundred writes; a store that takes no writes (an idle one, or
    /// one refusing writes under `maxmemory` after a FLUSHALL) needs
    /// someone to call it for its [`memory`](Store::memory) to fall: the
    /// server's housekeeping does, every 100 ms. A few passes free what a
    /// delete or a clear left behind.
    pub fn reclaim(&self) {
        self.tree.flush_epochs();
        self.tree.collect(false);
    }

    /// What the store holds in memory: its node buffers and the values
    /// stored out of line. Cheap (a few loads): read it as often as needed.
    /// Falls once what deletes, clears and expiry removed is reclaimed
    /// (see [`reclaim`](Store::reclaim)).
    pub fn memory(&self) -> MemoryUsage {
        let (node_buffers, node_bytes, value_bytes) = self.tree.memory();
        MemoryUsage {
            node_buffers,
            node_bytes,
            value_bytes,
        }
    }

    /// Where the store's bytes go, part by part (a walk over every node:
    /// for measurements, not for a hot path).
    pub fn footprint(&self) -> crate::Footprint {
        self.tree.footprint()
    }

    /// Interior nodes searched by a learned model (`Config::learned_search`),
    /// and all interior nodes.
    pub fn learned_nodes(&self) -> (usize, usize) {
        self.tree.learned_nodes()
    }

    /// The cache lines a lookup of `key` reads to search its interior nodes
    /// and its leaf: a measure for benchmarks (`docs/benchmarks.md`,
    /// "Learned node search").
    pub fn lookup_lines(&self, key: &[u8]) -> (usize, usize) {
        let _pin = self.tree.pin();
        let rv = self.tree.read_version();
        self.tree.lookup_lines(key, rv)
    }

    /// Allocated vs reachable node buffers.
    pub fn node_counts(&self) -> NodeCounts {
        let (live_buffers, reachable_buffers) = self.tree.node_counts();
        NodeCounts {
            live_buffers,
            reachable_buffers,
        }
    }
}

/// Verifies every checkpoint and log segment of the data directory `dir`
/// without changing anything (`combkv check`): the same decoders recovery
/// uses, and what recovery would do. Fails only if a file cannot be read.
pub fn check(dir: &std::path::Path) -> Result<CheckReport> {
    Ok(crate::durable::check::check(dir)?)
}

/// Whether `key` is one a store of `max_key_len` ([`Store::max_key_len`])
/// takes: the error every operation gives for it otherwise. A server checks
/// a request's keys with it before the request joins a read batch, which
/// one bad key would otherwise refuse as a whole.
pub fn check_key(key: &[u8], max_key_len: usize) -> Result<()> {
    if key.is_empty() {
        return Err(Error::KeyEmpty);
    }
    if key.len() > max_key_len {
        return Err(Error::KeyTooLong {
            len: key.len(),
            max: max_key_len,
        });
    }
    Ok(())
}
