//! Reads in the recent past: a history hold keeps every version from the
//! one current when it was taken on readable, so a reader can ask for the
//! store as of any version since. A replicated range serves reads at a
//! timestamp chosen elsewhere (one timestamp for reads that cross ranges)
//! with it; the engine knows nothing of why.

use super::Store;
use crate::error::{Error, Result};
use crate::tree::snapshots::HistoryHold;
use crate::types::{Item, ItemView, Now, Range, Version};

/// Every version from [`History::version`] on, held readable while this
/// guard lives. Unlike a [`super::Pin`], which holds one version, it holds
/// all of them since: the buffers every write since then replaced stay
/// (what memory the store's write rate over the hold's life costs).
#[derive(Debug)]
pub struct History(HistoryHold);

impl History {
    /// The oldest version readable through this hold.
    pub fn version(&self) -> Version {
        Version(self.0.version())
    }
}

impl Store {
    /// Holds every version from the current read version on.
    pub fn hold_history(&self) -> History {
        History(self.tree.hold_history())
    }

    /// Holds every version from `v` on, for a store that is the same at
    /// every version from `v` to its read version (the caller's promise,
    /// which the engine cannot check): one just restored from items at or
    /// below `v`, its clock raised past them with nothing written since.
    /// A range split off is one: its keys stood unchanged in the store
    /// it came from since that store's last write, and a read at a
    /// timestamp between that write and the split reads them as they are.
    /// A `v` above the read version holds from the read version.
    pub fn hold_history_since(&self, v: Version) -> History {
        History(self.tree.hold_history_since(v.0))
    }

    /// Runs `f` at version `v` (as of which the store holds exactly the
    /// writes at or below it) under `history`. A `v` above the read version
    /// reads at the read version: the store as it is now, which is the
    /// store at `v` if and only if no write at or below `v` is still to come
    /// (the caller's promise; a replica keeps it with its read floor).
    fn at_version<T>(&self, history: &History, v: Version, f: impl FnOnce(u64) -> T) -> Result<T> {
        if v < history.version() {
            return Err(Error::NoSuchSnapshot);
        }
        // Pin before taking the read version: see tree::reclaim.
        let guard = self.tree.pin();
        let rv = v.0.min(self.tree.read_version());
        let out = f(rv);
        drop(guard);
        Ok(out)
    }

    /// The item of `key` as of version `v` ([`Error::NoSuchSnapshot`] if `v`
    /// is older than `history`).
    pub fn get_at_version(
        &self,
        history: &History,
        v: Version,
        key: &[u8],
    ) -> Result<Option<Item>> {
        self.check_key(key)?;
        self.at_version(history, v, |rv| self.item_at(key, rv, &Now::lazy()))
    }

    /// As [`Store::scan`], as of version `v` under `history`.
    pub fn scan_at_version(
        &self,
        history: &History,
        v: Version,
        r: &Range,
        mut f: impl FnMut(ItemView<'_>) -> bool,
    ) -> Result<usize> {
        self.check_range(r)?;
        self.at_version(history, v, |rv| {
            self.visit_at_version(r, rv, &Now::lazy(), |it| f(it.view()))
        })
    }

    /// Moves the version clock so that the next write takes a version above
    /// `v` (nothing if it already would). For a store with one writer that
    /// calls it between its writes (a replica's apply): it must not run
    /// while a write is in flight. Readers see no change: no write lies
    /// between the old read version and `v`.
    pub fn raise_clock(&self, v: Version) {
        if self.tree.write_version() < v.0 {
            self.tree.reset_clock(v.0);
        }
    }
}
