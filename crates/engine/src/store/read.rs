//! Reads: point lookups, ranges, floor and ceil, and read-engine batches.
//! Each reads at one read version, taken after pinning the epoch; none
//! locks, waits or retries.

use std::ops::Bound;

use bytes::Bytes;

use super::Store;
use crate::error::Result;
use crate::readexec::{BatchResults, HotCache, Probe, ReadRequest, TreeView};
use crate::tree::node::{ItemRef, ValueRef};
use crate::types::{Item, ItemView, Now, Range, SnapshotId};

impl Store {
    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        Ok(self.get_item(key)?.map(|i| i.value))
    }

    /// The item of `key`: value, version and expiry.
    pub fn get_item(&self, key: &[u8]) -> Result<Option<Item>> {
        self.check_key(key)?;
        Ok(self.read(|rv, now| self.item_at(key, rv, now)))
    }

    pub(super) fn item_at(&self, key: &[u8], rv: u64, now: &Now) -> Option<Item> {
        self.tree
            .get_at(key, rv)
            .filter(|it| it.is_live(now))
            .map(|it| it.to_item())
    }

    /// The bytes the store holds for `key`'s live item (Redis's MEMORY
    /// USAGE), None when there is none: the item as its leaf encodes it
    /// (header, key, the inline value or the reference to an out-of-line
    /// one, expiry, client flags; in a leaf's log also its back pointer,
    /// order hint and directory entry), plus an out-of-line value's
    /// allocation as [`memory`](Store::memory) counts it. Not the share
    /// of the leaf's own structure (header, shortcuts, free room).
    pub fn item_memory(&self, key: &[u8]) -> Result<Option<u64>> {
        self.check_key(key)?;
        Ok(self.read(|rv, now| {
            let it = self.tree.get_at(key, rv).filter(|it| it.is_live(now))?;
            let mut bytes = u64::from(it.len);
            if it.raw.is_empty() {
                // A log item: its entry in the log directory.
                bytes += crate::config::LOG_DIR_ENTRY_BYTES as u64;
            }
            if let ValueRef::External(_, n) = it.value {
                bytes += crate::tree::node::value::allocation_bytes(n);
            }
            Some(bytes)
        }))
    }

    /// Looks `key` up and hands the item (if live) to `f` without copying.
    /// `f` runs while the reader holds its epoch pin: keep it short (copy or
    /// serialise what it needs).
    pub fn get_with<T>(&self, key: &[u8], f: impl FnOnce(Option<ItemView<'_>>) -> T) -> Result<T> {
        self.check_key(key)?;
        Ok(self.read(|rv, now| {
            let it = self.tree.get_at(key, rv).filter(|it| it.is_live(now));
            f(it.as_ref().map(ItemRef::view))
        }))
    }

    /// Visits the items of a range in order, as one consistent snapshot,
    /// without copying, until `f` returns false or the range (or its limit)
    /// ends; returns how many items `f` saw. Like `get_with`, `f` runs pinned.
    pub fn scan(&self, r: &Range, mut f: impl FnMut(ItemView<'_>) -> bool) -> Result<usize> {
        self.check_range(r)?;
        Ok(self.read(|rv, now| self.visit_at_version(r, rv, now, |it| f(it.view()))))
    }

    /// The items of a range, as one consistent snapshot.
    pub fn range(&self, r: &Range) -> Result<Vec<Item>> {
        self.check_range(r)?;
        Ok(self.read(|rv, now| self.range_at_version(r, rv, now)))
    }

    pub(super) fn range_at_version(&self, r: &Range, rv: u64, now: &Now) -> Vec<Item> {
        let mut out = Vec::new();
        self.visit_at_version(r, rv, now, |it| {
            out.push(it.to_item());
            true
        });
        out
    }

    /// Calls `f` with the range's items at `rv` (respecting the limit) until
    /// it returns false; returns how many it saw.
    pub(super) fn visit_at_version(
        &self,
        r: &Range,
        rv: u64,
        now: &Now,
        mut f: impl FnMut(&ItemRef<'_>) -> bool,
    ) -> usize {
        self.tree.visit_range(r, rv, now, &mut |it| f(&it))
    }

    /// The item with the greatest key `<= key`.
    pub fn floor(&self, key: &[u8]) -> Result<Option<Item>> {
        self.check_key(key)?;
        Ok(self.read(|rv, now| self.tree.floor_at(key, rv, now).map(|it| it.to_item())))
    }

    /// The item with the smallest key `>= key`.
    pub fn ceil(&self, key: &[u8]) -> Result<Option<Item>> {
        self.check_key(key)?;
        let r = Range::new(Bound::Included(key.to_vec()), Bound::Unbounded).with_limit(1);
        Ok(self
            .read(|rv, now| self.range_at_version(&r, rv, now))
            .pop())
    }

    /// Executes a batch of reads on the read engine: every request sees the
    /// same read version; results land in `out` (request `i`'s items are
    /// `out.items(i)`), exactly what the plain reads would return at that
    /// version. Invalid keys or bounds fail the whole batch before anything runs.
    pub fn read_batch(&self, requests: &[ReadRequest<'_>], out: &mut BatchResults) -> Result<()> {
        self.check_batch(requests)?;
        self.read(|rv, now| self.execute_batch(requests, rv, now, out, true));
        Ok(())
    }

    /// As `read_batch`, at a snapshot's version.
    pub fn read_batch_at(
        &self,
        id: SnapshotId,
        requests: &[ReadRequest<'_>],
        out: &mut BatchResults,
    ) -> Result<()> {
        self.check_batch(requests)?;
        // Snapshot reads bypass the hot cache: it serves the newest versions.
        self.at_snapshot(id, |rv, now| {
            self.execute_batch(requests, rv, now, out, false)
        })
    }

    pub(super) fn check_batch(&self, requests: &[ReadRequest<'_>]) -> Result<()> {
        for r in requests {
            match r {
                ReadRequest::Get(k) => self.check_key(k)?,
                ReadRequest::Range(r) => self.check_range(r)?,
            }
        }
        Ok(())
    }

    pub(super) fn execute_batch(
        &self,
        requests: &[ReadRequest<'_>],
        rv: u64,
        now: &Now,
        out: &mut BatchResults,
        cached: bool,
    ) {
        out.reset(requests.len(), rv);
        let mut hot = if cached { out.take_hot_cache() } else { None };
        let pending = match hot.as_deref_mut() {
            Some(cache) => self.answer_hot(cache, requests, rv, now, out),
            None => true,
        };
        // Back before the backend runs: a panic there (caught by a server)
        // must not leave the thread without its cache.
        out.put_hot_cache(hot);
        if pending {
            // One clock reading stamps the batch, as one read version does.
            let tree = TreeView::new(&self.tree);
            self.backend.execute(tree, rv, now.ms(), requests, out);
        }
    }

    /// Answers the batch's GETs that `cache` holds (or admits, with a
    /// stamping read of their own); true if requests are left for the
    /// backend.
    fn answer_hot(
        &self,
        cache: &mut HotCache,
        requests: &[ReadRequest<'_>],
        rv: u64,
        now: &Now,
        out: &mut BatchResults,
    ) -> bool {
        cache.attach(self.id);
        let mut pending = false;
        for (i, r) in requests.iter().enumerate() {
            let ReadRequest::Get(key) = r else {
                pending = true;
                continue;
            };
            let proven = match cache.probe(&self.tree, key, rv) {
                Probe::Hit(p) => p,
                Probe::Fill(slot) => match self.tree.hot_stamp(key, rv) {
                    Some((stamp, p)) => {
                        cache.fill(slot, key, stamp);
                        p
                    }
                    None => {
                        pending = true;
                        continue;
                    }
                },
                Probe::Miss => {
                    pending = true;
                    continue;
                }
            };
            out.answer_proven(i, proven, now);
        }
        pending
    }
}
