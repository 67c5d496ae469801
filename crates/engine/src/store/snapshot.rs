//! Snapshots: read versions pinned for a while, and reads at them.

use std::time::Duration;

use super::Store;
use crate::error::{Error, Result};
use crate::tree::snapshots::VersionPin;
use crate::types::{Item, ItemView, Now, Range, SnapshotId, SnapshotInfo, Version};

/// The current read version, held while this guard lives: reads at it
/// (`Store::visit_all_at`) see the store as of that version. For the
/// engine's users that take their own consistent copies (replication
/// snapshots); unlike a [`SnapshotId`] it has no expiry, counts toward no
/// limit and no client can release it.
#[derive(Debug)]
pub struct Pin(VersionPin);

impl Pin {
    /// The version held.
    pub fn version(&self) -> Version {
        Version(self.0.version())
    }
}

impl Store {
    /// Pins the current read version for `ttl`. Reads at the snapshot see the
    /// store exactly as of that version.
    pub fn snapshot(&self, ttl: Duration) -> Result<SnapshotId> {
        if ttl > self.config.max_snapshot_age {
            return Err(Error::SnapshotTooLong {
                max_secs: self.config.max_snapshot_age.as_secs(),
            });
        }
        self.tree
            .create_snapshot(ttl, self.config.max_snapshots)
            .map(|(id, _)| SnapshotId(id))
            .ok_or(Error::TooManySnapshots)
    }

    /// Releases a snapshot. False if unknown, released or expired.
    pub fn release_snapshot(&self, id: SnapshotId) -> bool {
        self.tree.release_snapshot(id.0)
    }

    /// Live snapshots: id, version and the time each has left.
    pub fn list_snapshots(&self) -> Vec<SnapshotInfo> {
        self.tree
            .list_snapshots()
            .into_iter()
            .map(|h| SnapshotInfo {
                id: SnapshotId(h.id),
                version: Version(h.version),
                left: h.left,
            })
            .collect()
    }

    /// Holds the current read version until the guard drops.
    pub fn pin(&self) -> Pin {
        Pin(self.tree.pin_version())
    }

    /// Runs `f` at the snapshot's version, holding the snapshot against
    /// release and expiry meanwhile.
    pub(super) fn at_snapshot<T>(
        &self,
        id: SnapshotId,
        f: impl FnOnce(u64, &Now) -> T,
    ) -> Result<T> {
        self.tree
            .at_snapshot(id.0, |rv| f(rv, &Now::lazy()))
            .ok_or(Error::NoSuchSnapshot)
    }

    /// The item of `key` as of a snapshot.
    pub fn get_at(&self, id: SnapshotId, key: &[u8]) -> Result<Option<Item>> {
        self.check_key(key)?;
        self.at_snapshot(id, |rv, now| self.item_at(key, rv, now))
    }

    /// A range as of a snapshot.
    pub fn range_at(&self, id: SnapshotId, r: &Range) -> Result<Vec<Item>> {
        self.check_range(r)?;
        self.at_snapshot(id, |rv, now| self.range_at_version(r, rv, now))
    }

    /// As [`Store::scan`], as of a snapshot: `f` sees the range's items at
    /// the snapshot's version until it returns false.
    pub fn scan_at(
        &self,
        id: SnapshotId,
        r: &Range,
        mut f: impl FnMut(ItemView<'_>) -> bool,
    ) -> Result<usize> {
        self.check_range(r)?;
        self.at_snapshot(id, |rv, now| {
            self.visit_at_version(r, rv, now, |it| f(it.view()))
        })
    }
}
