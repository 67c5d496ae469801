//! Bulk loading (DPA-Store section 3.2.4): a tree built from items in
//! ascending key order without the write path. Leaves are filled left to
//! right, each linked to the next; then every interior level is built from
//! the first keys of the level below, until one node remains, which becomes
//! the root. Recovery loads a checkpoint this way.

use super::Tree;
use super::build::{self, Child, Entry, LeafWriter};
use super::node::{Lid, ValueRef, key_cmp};
use crate::config::Geometry;

/// Why the bulk loader refused an item (the tree layer's only error: a
/// write to a live tree never fails, it restarts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum LoadError {
    /// The key is empty or longer than the geometry allows.
    KeyLength { len: usize, max: usize },
    /// The key is not above the one pushed before it.
    OutOfOrder,
    /// The item has version 0 (versions start at 1).
    ZeroVersion,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::KeyLength { len, max } => write!(f, "key of {len} bytes outside 1..={max}"),
            LoadError::OutOfOrder => f.write_str("keys out of order"),
            LoadError::ZeroVersion => f.write_str("version 0"),
        }
    }
}

impl std::error::Error for LoadError {}

/// Builds a tree from a stream of items (`push` in strictly ascending key
/// order, then `finish`). Nobody else sees the tree until `finish` returns.
pub(crate) struct BulkLoader<'g> {
    /// Taken by `finish`.
    tree: Option<Tree>,
    /// The leaf being filled; its LID once known (the first leaf's LID is
    /// decided when a second leaf begins: alone, it is the root).
    leaf: Option<(LeafWriter<'g>, Option<Lid>)>,
    /// First key of the current leaf.
    leaf_first: Vec<u8>,
    /// Finished leaves: first key and LID.
    leaves: Vec<(Vec<u8>, Lid)>,
    last_key: Vec<u8>,
    items: u64,
    max_version: u64,
    /// The buffer version of the leaf being filled (`changed_at`).
    leaf_version: u64,
    g: &'g Geometry,
}

impl std::fmt::Debug for BulkLoader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BulkLoader")
            .field("items", &self.items)
            .field("leaves", &self.leaves.len())
            .finish()
    }
}

/// Fraction of a node a bulk-loaded node is filled to, in eighths: full
/// enough to keep the tree small, with room for a log merge or a few
/// inserts before the first split.
const FILL_EIGHTHS: usize = 7;

impl<'g> BulkLoader<'g> {
    pub(crate) fn new(g: &'g Geometry) -> BulkLoader<'g> {
        BulkLoader {
            tree: Some(Tree::new(*g)),
            leaf: None,
            leaf_first: Vec::new(),
            leaves: Vec::new(),
            last_key: Vec::new(),
            items: 0,
            max_version: 0,
            leaf_version: 0,
            g,
        }
    }

    /// Adds the next item. Keys must be strictly ascending and within the
    /// geometry's key limit; values within the store's value limit (the
    /// caller checks that one).
    pub(crate) fn push(
        &mut self,
        key: &[u8],
        value: &[u8],
        version: u64,
        expiry: u64,
        cflags: u32,
    ) -> Result<(), LoadError> {
        if key.is_empty() || key.len() > self.g.max_key_len {
            return Err(LoadError::KeyLength {
                len: key.len(),
                max: self.g.max_key_len,
            });
        }
        if self.items > 0 && key_cmp(key, &self.last_key) != std::cmp::Ordering::Greater {
            return Err(LoadError::OutOfOrder);
        }
        if version == 0 {
            return Err(LoadError::ZeroVersion);
        }
        if expiry != 0 {
            self.tree().note_expiring();
        }
        let entry = Entry {
            key,
            value: ValueRef::Inline(value),
            version,
            expiry,
            cflags,
            raw: &[],
        };
        let len = entry.sorted_len(self.g);
        let fill = self.g.leaf_capacity * FILL_EIGHTHS / 8;
        let full = self
            .leaf
            .as_ref()
            .is_some_and(|(w, _)| w.bytes() > 0 && w.bytes() + len > fill);
        if full {
            let (w, lid) = self.leaf.take().expect("a leaf is open");
            let lid = lid.unwrap_or_else(|| self.tree().pages.allocate());
            let next = self.tree().pages.allocate();
            let p = w.finish(&self.tree().shared.counter, self.leaf_version, lid, next);
            self.leaf_version = 0;
            super::unlock_new(p);
            self.tree().pages.set(lid, Some(p));
            self.leaves
                .push((std::mem::take(&mut self.leaf_first), lid));
            self.leaf = Some((
                LeafWriter::new(self.g, &self.tree().shared.counter, fill),
                Some(next),
            ));
        }
        if self.leaf.is_none() {
            let w = LeafWriter::new(self.g, &self.tree().shared.counter, fill);
            self.leaf = Some((w, None));
        }
        let (w, _) = self.leaf.as_mut().expect("a leaf is open");
        if w.bytes() == 0 {
            self.leaf_first = key.to_vec();
        }
        w.push(&entry);
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.items += 1;
        self.max_version = self.max_version.max(version);
        Ok(())
    }

    /// Something changed at `version` in the key range of the leaf being
    /// filled (before the first push: of the first leaf): the leaf is built
    /// at the largest such version rather than 0, as a write at it would
    /// have published it, so that a delta run from below it reads the
    /// leaf (`tree/delta.rs`). The caller raises the clock to it.
    pub(crate) fn changed_at(&mut self, version: u64) {
        self.leaf_version = self.leaf_version.max(version);
    }

    /// Items pushed so far.
    pub(crate) fn items(&self) -> u64 {
        self.items
    }

    /// Builds the interior levels and returns the tree and the largest item
    /// version loaded. The tree's clock is still at 0: the caller sets it.
    pub(crate) fn finish(mut self) -> (Tree, u64) {
        self.tree().keys.add(self.items as i64);
        let Some((w, lid)) = self.leaf.take() else {
            return (self.take(), 0);
        };
        let Some(lid) = lid else {
            // One leaf: it is the root.
            let p = w.finish(
                &self.tree().shared.counter,
                self.leaf_version,
                Lid::ROOT,
                Lid::NONE,
            );
            self.set_root(p);
            return (self.take(), self.max_version);
        };
        let p = w.finish(
            &self.tree().shared.counter,
            self.leaf_version,
            lid,
            Lid::NONE,
        );
        super::unlock_new(p);
        self.tree().pages.set(lid, Some(p));
        self.leaves
            .push((std::mem::take(&mut self.leaf_first), lid));
        let mut level_nodes = std::mem::take(&mut self.leaves);
        let mut level = 1u8;
        let fill = self.g.interior_capacity * FILL_EIGHTHS / 8;
        loop {
            // Group the level's nodes under parents of at most `fill` bytes
            // of separators, at least two children each.
            let mut groups: Vec<std::ops::Range<usize>> = Vec::new();
            let (mut start, mut bytes) = (0, 0);
            for (i, (key, _)) in level_nodes.iter().enumerate() {
                let len = build::interior_item_len(key);
                if i > start + 1 && bytes + len > fill {
                    groups.push(start..i);
                    start = i;
                    bytes = 0;
                }
                if i > start {
                    bytes += len;
                }
            }
            groups.push(start..level_nodes.len());
            // A lone last child would make a one-child parent: give it to
            // the group before.
            if groups.len() > 1 && groups.last().is_some_and(|r| r.len() < 2) {
                let last = groups.pop().expect("two groups");
                groups.last_mut().expect("one group left").end = last.end;
            }
            let root_level = groups.len() == 1;
            let mut parents = Vec::with_capacity(groups.len());
            for r in groups {
                let children: Vec<Child<'_>> = level_nodes[r.clone()]
                    .iter()
                    .map(|(key, lid)| Child { key, lid: *lid })
                    .collect();
                let lid = if root_level {
                    Lid::ROOT
                } else {
                    self.tree().pages.allocate()
                };
                let p = build::build_interior(
                    self.g,
                    &self.tree().shared.counter,
                    &children,
                    0,
                    lid,
                    level,
                );
                if root_level {
                    self.set_root(p);
                    return (self.take(), self.max_version);
                }
                super::unlock_new(p);
                self.tree().pages.set(lid, Some(p));
                parents.push((level_nodes[r.start].0.clone(), lid));
            }
            level_nodes = parents;
            level += 1;
        }
    }

    fn tree(&self) -> &Tree {
        self.tree.as_ref().expect("the loader is not finished")
    }

    fn take(&mut self) -> Tree {
        self.tree.take().expect("the loader is not finished")
    }

    /// Replaces the empty root `Tree::new` made with `p`.
    fn set_root(&mut self, p: super::node::NodePtr) {
        super::unlock_new(p);
        let empty = self
            .tree()
            .pages
            .get(Lid::ROOT)
            .expect("a new tree has a root");
        self.tree().pages.set(Lid::ROOT, Some(p));
        // SAFETY: the tree has not been shared yet, so no reader or writer
        // holds the empty root, and nothing else links to it.
        unsafe { empty.free(self.g, &self.tree().shared.counter) };
    }
}

impl Drop for BulkLoader<'_> {
    /// An abandoned load (a corrupt checkpoint) frees the leaf it was
    /// filling; the tree frees what it has published.
    fn drop(&mut self) {
        if let (Some((w, _)), Some(tree)) = (self.leaf.take(), &self.tree) {
            w.discard(&tree.shared.counter);
        }
    }
}
