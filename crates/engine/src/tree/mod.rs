//! The Honeycomb B+tree (paper section 3): fixed-size node buffers named by
//! LIDs through a page table, multi-version concurrency control with a global
//! write and read version, wait-free readers, lock-based writers with
//! copy-on-write structure changes, and epoch-based reclamation.
//!
//! - `node`: the buffer layout and item encoding (the only raw-byte code)
//! - `build`: laying out fresh buffers (merges, splits)
//! - `page_table`: LID -> buffer
//! - `version`: write/read versions and in-order release
//! - `read`: descents, leaf search, ordered leaf iteration with order hints
//! - `write`: log appends, merges, splits, node merges
//! - `group`: atomic groups (their clock hold and log brackets)
//! - `clear`: FLUSHALL (its record and the leaf-by-leaf delete)
//! - `delta`: which leaves changed since a version (incremental checkpoints)
//! - `snapshots`: pinned read versions
//! - `reclaim`, `epoch`: when a replaced buffer may be freed
//!
//! Nothing outside this module touches a `Tree`'s parts: the store, the
//! read engine and the durability layer call its methods. The durability
//! layer reaches in through one hook, [`VersionLog`], through which every
//! write takes its version and records its log entry.

pub(crate) mod build;
mod clear;
pub(crate) mod count;
pub(crate) mod delta;
pub(crate) mod epoch;
pub(crate) mod footprint;
mod group;
pub(crate) use group::Group;
#[cfg(test)]
mod layout_check;
#[cfg(test)]
mod learned_tests;
pub(crate) mod load;
pub(crate) mod node;
pub(crate) mod page_table;
pub(crate) mod read;
pub(crate) mod reclaim;
pub(crate) mod scan;
pub(crate) mod snapshots;
pub(crate) mod version;
pub(crate) mod write;

use std::sync::Arc;

use crate::config::Geometry;
use crate::sync::Mutex;
use count::ShardedCount;
use node::{BufferCounter, Lid};
use page_table::PageTable;
use reclaim::Reclaimer;
use snapshots::SnapshotRegistry;
use version::{VersionClock, WriteVersion};

/// The durability layer's hook into the write path. A write takes its
/// version through it while it holds its leaf lock, so the log receives
/// records in version order (and, for one key, in the order the writes
/// took effect).
pub(crate) trait VersionLog: Send + Sync + std::fmt::Debug {
    /// Takes the next version from `clock` and records `entry` under it
    /// (`None`: a version without a record), atomically with respect to
    /// every other call. The tree completes the version; the hook must not
    /// unwind once it has taken it (it only appends bytes to a buffer).
    fn next_version(&self, clock: &VersionClock, entry: Option<LogEntry<'_>>) -> u64;
}

/// What a logged write did to its key.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LogEntry<'a> {
    Put {
        key: &'a [u8],
        value: &'a [u8],
        /// Unix ms, 0 = never.
        expiry: u64,
        /// Client flags, 0 = none.
        flags: u32,
    },
    Delete {
        key: &'a [u8],
    },
    /// An atomic group's writes follow (`Store::write_atomically`).
    GroupBegin,
    /// The group begun at version `begin` is complete.
    GroupEnd {
        begin: u64,
    },
    /// Every item with a smaller version is gone (FLUSHALL).
    Clear,
}

/// State shared with deferred reclamation closures (which may outlive the tree).
#[derive(Debug)]
struct Shared {
    geometry: Geometry,
    counter: BufferCounter,
    reclaimer: Reclaimer,
    snapshots: Mutex<SnapshotRegistry>,
    /// LIDs whose anchors were freed, waiting to return to the allocator.
    recycled: Mutex<Vec<Lid>>,
    /// Deferred reclamation closures not yet run (retire graces and frees).
    deferred: std::sync::atomic::AtomicUsize,
}

/// The tree: page table, versions, shared reclamation state. Its parts are
/// private to this module; the other layers call its methods.
#[derive(Debug)]
pub(crate) struct Tree {
    g: Geometry,
    pages: PageTable,
    /// Shared with the log flusher, which raises its limit.
    clock: Arc<VersionClock>,
    shared: Arc<Shared>,
    epochs: epoch::Epochs,
    /// Set on durable stores: every version is taken through it.
    log: Option<Arc<dyn VersionLog>>,
    /// Keys stored (expired ones included until they are swept).
    keys: ShardedCount,
    /// Set once an item with an expiry is stored or loaded; until then an
    /// expiry sweep has nothing to find and visits nothing.
    expiring: crate::sync::AtomicBool,
}

impl Tree {
    /// Records that an item with an expiry exists (see `expiring`). Loads
    /// first: once set, writers only read the line.
    #[inline]
    pub(crate) fn note_expiring(&self) {
        if !self.expiring.load(crate::sync::Ordering::Relaxed) {
            self.expiring.store(true, crate::sync::Ordering::Relaxed);
        }
    }

    pub(crate) fn new(g: Geometry) -> Tree {
        let shared = Arc::new(Shared {
            geometry: g,
            counter: BufferCounter::new(g.node_size),
            reclaimer: Reclaimer::default(),
            snapshots: Mutex::new(SnapshotRegistry::default()),
            recycled: Mutex::new(Vec::new()),
            deferred: std::sync::atomic::AtomicUsize::new(0),
        });
        let pages = PageTable::new();
        pages.ensure_chunk(Lid::ROOT);
        let root = build::build_leaf(&g, &shared.counter, &[], 0, Lid::ROOT, Lid::NONE);
        unlock_new(root);
        pages.set(Lid::ROOT, Some(root));
        Tree {
            g,
            pages,
            clock: Arc::new(VersionClock::starting_at(0)),
            shared,
            epochs: epoch::Epochs::default(),
            log: None,
            keys: ShardedCount::default(),
            expiring: crate::sync::AtomicBool::new(false),
        }
    }

    /// Sets the durability layer's hook: from now on every write version
    /// is taken through `log`, which records the write's entry under it.
    pub(crate) fn set_log(&mut self, log: Arc<dyn VersionLog>) {
        self.log = Some(log);
    }

    /// The version clock, for the log flusher (which raises its limit and
    /// poisons it on a failure).
    pub(crate) fn version_clock(&self) -> Arc<VersionClock> {
        Arc::clone(&self.clock)
    }

    /// Restarts the clock so that the next write takes `v + 1` (recovery
    /// replays records with their own versions; nothing else may write).
    pub(crate) fn reset_clock(&self, v: u64) {
        self.clock.reset_to(v);
    }

    /// Pins the epoch: buffers reachable now stay allocated until the guard
    /// is dropped. A reader pins *before* it loads the read version (see
    /// `reclaim`).
    #[inline(always)]
    pub(crate) fn pin(&self) -> epoch::Guard {
        self.epochs.pin()
    }

    /// Pushes deferred reclamation along.
    pub(crate) fn flush_epochs(&self) {
        self.epochs.flush();
    }

    /// The read version: a read that starts now sees exactly the writes up
    /// to it.
    #[inline(always)]
    pub(crate) fn read_version(&self) -> u64 {
        self.clock.read_version()
    }

    /// The last version handed out, released or not.
    pub(crate) fn write_version(&self) -> u64 {
        self.clock.write_version()
    }

    /// Waits until every write up to `v` is released. False if the clock is
    /// poisoned first (`v` will never be released).
    pub(crate) fn wait_released(&self, v: u64) -> bool {
        self.clock.wait_released(v)
    }

    /// Keys stored (expired ones included until they are swept); exact once
    /// writers are quiescent.
    pub(crate) fn key_count(&self) -> u64 {
        self.keys.get()
    }

    /// Whether an item with an expiry was ever stored or loaded (until then
    /// an expiry sweep has nothing to find).
    pub(crate) fn has_expiring(&self) -> bool {
        self.expiring.load(crate::sync::Ordering::Relaxed)
    }

    /// The page table (LID -> newest buffer), for the read engine's
    /// staged descent.
    #[inline(always)]
    pub(crate) fn pages(&self) -> &PageTable {
        &self.pages
    }

    /// Takes the next write version, through the log if there is one. The
    /// caller completes it once its write is published; if the caller
    /// unwinds first, the guard completes it as a no-op (see
    /// `version::WriteVersion`).
    #[inline]
    pub(crate) fn next_version(&self, entry: Option<LogEntry<'_>>) -> WriteVersion<'_> {
        let v = match &self.log {
            Some(log) => log.next_version(&self.clock, entry),
            None => self.clock.next(),
        };
        self.clock.guard(v)
    }

    /// Current interior nodes with a learned model, and all current
    /// interior nodes.
    pub(crate) fn learned_nodes(&self) -> (usize, usize) {
        let _guard = self.epochs.pin();
        let interior: Vec<u8> = self
            .pages
            .entries()
            .into_iter()
            .filter(|(_, p)| !p.is_leaf() && p.header().flags & node::NODE_DEAD == 0)
            .map(|(_, p)| p.header().flags)
            .collect();
        let learned = interior
            .iter()
            .filter(|&&f| f & node::NODE_LEARNED != 0)
            .count();
        (learned, interior.len())
    }

    /// (allocated buffers, their bytes, bytes of the out-of-line values
    /// they reference): three loads and a sum of shards, no walk.
    pub(crate) fn memory(&self) -> (usize, u64, u64) {
        let c = &self.shared.counter;
        (
            c.live.load(std::sync::atomic::Ordering::Relaxed),
            c.live_bytes(),
            c.external_bytes.get(),
        )
    }

    /// (allocated buffers, buffers reachable from the page table).
    pub(crate) fn node_counts(&self) -> (usize, usize) {
        let guard = self.epochs.pin();
        let mut reachable = 0;
        for (_, head) in self.pages.entries() {
            let mut cur = Some(head);
            while let Some(p) = cur {
                reachable += 1;
                cur = p.old();
            }
        }
        drop(guard);
        let live = self
            .shared
            .counter
            .live
            .load(std::sync::atomic::Ordering::SeqCst);
        (live, reachable)
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        self.shared.free_all(&self.pages);
    }
}

/// Clears the lock bit of a buffer created locked by `build`.
pub(crate) fn unlock_new(p: node::NodePtr) {
    let s = p.header().state.load(std::sync::atomic::Ordering::Relaxed);
    p.header().state.store(
        s & !node::STATE_LOCKED,
        std::sync::atomic::Ordering::Release,
    );
}
