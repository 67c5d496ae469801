//! Structure changes (Honeycomb 3.5): the leaf's new content planned level
//! by level up the path (splits, root growth and shrinkage, node merges),
//! every replaced node try-locked, then all of it published copy-on-write
//! under one version.

use std::sync::atomic::Ordering as CoreOrdering;

use super::lock::{HeldLocks, LockedLeaf};
use super::{Step, WriteOp, fault, log_entry};
use crate::tree::Tree;
use crate::tree::build::{self, Child, Entry, interior_item_len};
use crate::tree::epoch::Guard;
use crate::tree::node::{Lid, NodePtr, ValueRef, decode_interior, key_cmp};
use crate::tree::read::{WalkFrom, leaf_walk, published};
use crate::tree::version::WriteVersion;

/// The children of an interior buffer; the first entry's key is unused.
pub(super) fn children_of(p: NodePtr) -> Vec<Child<'static>> {
    let buf = published(p);
    let h = p.header();
    let mut out = Vec::with_capacity(h.nitems as usize + 1);
    out.push(Child {
        key: &[],
        lid: Lid(h.link),
    });
    let mut at = h.sorted_start as usize;
    while at < h.sorted_end as usize {
        let (k, lid, len) = decode_interior(buf, at);
        out.push(Child { key: k, lid });
        at += len;
    }
    out
}

/// The newest state of every key of a locked leaf, delete markers dropped.
pub(super) fn leaf_entries(leaf: NodePtr) -> Vec<Entry<'static>> {
    let mut out = Vec::with_capacity(leaf.header().nitems as usize + 32);
    leaf_walk(leaf, u64::MAX, WalkFrom::First, |it| {
        if !it.is_tombstone() {
            out.push(Entry {
                key: it.key,
                value: it.value,
                version: it.version,
                expiry: it.expiry,
                cflags: it.cflags,
                raw: it.raw,
            });
        }
        true
    });
    out
}

/// Content of a node being rebuilt.
pub(super) enum Content<'a> {
    Leaf(Vec<Entry<'a>>),
    /// Children and level.
    Interior(Vec<Child<'a>>, u8),
}

/// Whether a split closes its current part before an item that would
/// bring the part to `with` bytes. Parts close near `target`, except that
/// the last of the `parts` planned takes the rest: closing every part a
/// little under the target (whole items) would otherwise leave a tiny
/// extra part, a nearly empty node, at the end. A part never passes `cap`.
fn close_part(with: usize, target: usize, cap: usize, closed: usize, parts: usize) -> bool {
    with > cap || (with > target && closed + 1 < parts)
}

impl<'a> Content<'a> {
    pub(super) fn bytes(&self, t: &Tree) -> usize {
        match self {
            Content::Leaf(e) => e.iter().map(|e| e.sorted_len(&t.g)).sum(),
            Content::Interior(c, _) => c.iter().skip(1).map(|c| interior_item_len(c.key)).sum(),
        }
    }
    pub(super) fn capacity(&self, t: &Tree) -> usize {
        match self {
            Content::Leaf(_) => t.g.leaf_capacity,
            Content::Interior(..) => t.g.interior_capacity,
        }
    }
    pub(super) fn level(&self) -> u8 {
        match self {
            Content::Leaf(_) => 0,
            Content::Interior(_, l) => *l,
        }
    }
    /// Splits into parts that each fit; each part's separator is its first key.
    fn split(self, t: &Tree) -> Vec<(&'a [u8], Content<'a>)> {
        let cap = self.capacity(t);
        let total = self.bytes(t);
        let parts = total.div_ceil(cap * 3 / 4).max(1);
        let target = total / parts;
        match self {
            Content::Leaf(entries) => {
                let mut out: Vec<(&'a [u8], Content<'a>)> = Vec::new();
                let mut cur: Vec<Entry<'a>> = Vec::new();
                let mut bytes = 0;
                for e in entries {
                    let len = e.sorted_len(&t.g);
                    if !cur.is_empty() && close_part(bytes + len, target, cap, out.len(), parts) {
                        let key = cur[0].key;
                        out.push((key, Content::Leaf(std::mem::take(&mut cur))));
                        bytes = 0;
                    }
                    bytes += len;
                    cur.push(e);
                }
                if !cur.is_empty() {
                    out.push((cur[0].key, Content::Leaf(cur)));
                }
                out
            }
            Content::Interior(children, level) => {
                let mut out = Vec::new();
                let mut cur: Vec<Child<'a>> = Vec::new();
                let mut bytes = 0;
                for c in children {
                    let len = interior_item_len(c.key);
                    if !cur.is_empty() && close_part(bytes + len, target, cap, out.len(), parts) {
                        let key = cur[0].key;
                        out.push((key, Content::Interior(std::mem::take(&mut cur), level)));
                        bytes = 0;
                    }
                    bytes += len;
                    cur.push(c);
                }
                if !cur.is_empty() {
                    out.push((cur[0].key, Content::Interior(cur, level)));
                }
                out
            }
        }
    }
}

/// A node to write: its LID (existing or fresh), content, and the buffer it replaces.
pub(super) struct NewNode<'a> {
    pub(super) lid: Lid,
    pub(super) content: Content<'a>,
    pub(super) replaces: Option<NodePtr>,
    /// Leaves: right sibling.
    pub(super) right: Lid,
}

/// Everything one structure change publishes.
#[derive(Default)]
pub(super) struct Plan<'a> {
    pub(super) held: HeldLocks,
    pub(super) nodes: Vec<NewNode<'a>>,
    /// LIDs removed from the tree and their last buffer.
    pub(super) kills: Vec<(Lid, NodePtr)>,
    pub(super) fresh: Vec<Lid>,
}

impl Tree {
    /// Slow path: merge the leaf's log into a new buffer, splitting or
    /// merging nodes as needed, and publish the change under one version.
    /// None if a lock could not be taken (everything is unlocked again).
    pub(super) fn restructure(
        &self,
        guard: &Guard,
        path: &[Step],
        locked: LockedLeaf,
        key: &[u8],
        op: &WriteOp<'_>,
        logged: bool,
    ) -> Option<u64> {
        let leaf = *path.last().expect("leaf");
        let mut entries = leaf_entries(leaf.buf);
        let pos = entries.binary_search_by(|e| key_cmp(e.key, key));
        match (op, pos) {
            (
                WriteOp::Put {
                    value,
                    expiry,
                    flags,
                },
                Ok(i),
            ) => {
                entries[i] = Entry {
                    key,
                    value: ValueRef::Inline(value),
                    version: 0,
                    expiry: *expiry,
                    cflags: *flags,
                    raw: &[],
                }
            }
            (
                WriteOp::Put {
                    value,
                    expiry,
                    flags,
                },
                Err(i),
            ) => entries.insert(
                i,
                Entry {
                    key,
                    value: ValueRef::Inline(value),
                    version: 0,
                    expiry: *expiry,
                    cflags: *flags,
                    raw: &[],
                },
            ),
            (WriteOp::Delete, Ok(i)) => {
                entries.remove(i);
            }
            (WriteOp::Delete, Err(_)) | (WriteOp::Noop, _) => {}
        }
        let mut plan = Plan {
            held: HeldLocks::starting_at(locked),
            ..Plan::default()
        };
        let ok = self.plan(path, Content::Leaf(entries), &mut plan);
        if !ok {
            drop(std::mem::take(&mut plan.held));
            for lid in plan.fresh.drain(..) {
                self.pages.recycle(lid);
            }
            return None;
        }
        let v = self.next_version(log_entry(key, op, logged));
        fault::point("restructure");
        Some(self.publish(guard, plan, v))
    }

    /// Decides the change level by level, from the leaf (path's last step)
    /// up, taking the locks it needs. False if a lock failed.
    fn plan<'a>(&self, path: &[Step], content: Content<'a>, plan: &mut Plan<'a>) -> bool {
        let mut level_idx = path.len() - 1;
        let mut content = content;
        let mut node = path[level_idx];
        loop {
            let bytes = content.bytes(self);
            let cap = content.capacity(self);
            let right = if content.level() == 0 {
                Lid(node.buf.header().link)
            } else {
                Lid::NONE
            };
            let fits = if node.lid == Lid::ROOT {
                bytes <= cap
            } else {
                bytes <= cap && bytes >= cap / 4
            };
            if fits {
                // This node is the root of the change.
                plan.nodes.push(NewNode {
                    lid: node.lid,
                    content,
                    replaces: Some(node.buf),
                    right,
                });
                return true;
            }
            if node.lid == Lid::ROOT {
                self.grow_root(plan, node, content, right);
                return true;
            }
            // The parent changes: lock it (its state was recorded on the way down).
            let parent = path[level_idx - 1];
            let mut siblings = children_of(parent.buf);
            let idx = siblings
                .iter()
                .position(|c| c.lid == node.lid)
                .expect("child in parent");
            let (replace_from, replace_n, new_children) = if bytes > cap {
                if !self.lock(plan, parent) {
                    return false;
                }
                let parts = self.split_into(plan, node, siblings[idx].key, content, right);
                (idx, 1, parts)
            } else {
                // Underfull: merge with a neighbour under the same parent if
                // one can be locked and the result stays well under capacity.
                match self.try_merge(plan, parent, &siblings, idx, node, content) {
                    Err(c) => {
                        plan.nodes.push(NewNode {
                            lid: node.lid,
                            content: c,
                            replaces: Some(node.buf),
                            right,
                        });
                        return true;
                    }
                    Ok((from, child)) => (from, 2, vec![child]),
                }
            };
            siblings.splice(replace_from..replace_from + replace_n, new_children);
            let level = parent.buf.header().level;
            content = Content::Interior(siblings, level);
            level_idx -= 1;
            node = parent;
            // A root left with one child we just built: the child becomes the root.
            if node.lid == Lid::ROOT
                && let Content::Interior(ch, _) = &content
                && ch.len() == 1
                && self.collapse_root(plan, ch[0].lid, node)
            {
                return true;
            }
        }
    }

    /// Grows the tree: `content`, too much for the root, is split into
    /// parts under fresh LIDs, and the root LID gets a new buffer one level
    /// up whose children they are.
    fn grow_root<'a>(&self, plan: &mut Plan<'a>, root: Step, content: Content<'a>, right: Lid) {
        let level = content.level();
        let parts = content.split(self);
        let mut children = Vec::new();
        let n = parts.len();
        let lids: Vec<Lid> = (0..n).map(|_| self.fresh(plan)).collect();
        for (i, (sep, c)) in parts.into_iter().enumerate() {
            let right = if i + 1 < n { lids[i + 1] } else { right };
            children.push(Child {
                key: sep,
                lid: lids[i],
            });
            plan.nodes.push(NewNode {
                lid: lids[i],
                content: c,
                replaces: None,
                right,
            });
        }
        plan.nodes.push(NewNode {
            lid: Lid::ROOT,
            content: Content::Interior(children, level + 1),
            replaces: Some(root.buf),
            right: Lid::NONE,
        });
    }

    /// Splits the overfull `content` of `node` into parts: the first keeps
    /// its LID (and `first_key`, its entry in the parent), the others get
    /// fresh LIDs. Returns the parts' entries for the parent.
    fn split_into<'a>(
        &self,
        plan: &mut Plan<'a>,
        node: Step,
        first_key: &'a [u8],
        content: Content<'a>,
        right: Lid,
    ) -> Vec<Child<'a>> {
        let parts = content.split(self);
        let n = parts.len();
        let mut lids = vec![node.lid];
        lids.extend((1..n).map(|_| self.fresh(plan)));
        let mut new_children = Vec::new();
        for (i, (sep, c)) in parts.into_iter().enumerate() {
            let key = if i == 0 { first_key } else { sep };
            let r = if i + 1 < n { lids[i + 1] } else { right };
            let replaces = if i == 0 { Some(node.buf) } else { None };
            new_children.push(Child { key, lid: lids[i] });
            plan.nodes.push(NewNode {
                lid: lids[i],
                content: c,
                replaces,
                right: r,
            });
        }
        new_children
    }

    /// The root has one child, which this plan builds: give its content to
    /// the root LID instead. True if done.
    pub(super) fn collapse_root<'a>(&self, plan: &mut Plan<'a>, child: Lid, root: Step) -> bool {
        let Some(i) = plan.nodes.iter().position(|n| n.lid == child) else {
            return false;
        };
        if !self.lock(plan, root) {
            return false;
        }
        let mut n = plan.nodes.remove(i);
        match n.replaces {
            Some(old) => plan.kills.push((child, old)),
            None => {
                if let Some(f) = plan.fresh.iter().position(|&l| l == child) {
                    let lid = plan.fresh.swap_remove(f);
                    self.pages.recycle(lid);
                }
            }
        }
        n.lid = Lid::ROOT;
        n.replaces = Some(root.buf);
        n.right = Lid::NONE;
        plan.nodes.push(n);
        true
    }

    pub(super) fn lock<'a>(&self, plan: &mut Plan<'a>, step: Step) -> bool {
        plan.held.holds(step.buf) || plan.held.try_lock(step.buf, step.state)
    }

    pub(super) fn fresh<'a>(&self, plan: &mut Plan<'a>) -> Lid {
        let lid = self.pages.allocate();
        plan.fresh.push(lid);
        lid
    }

    /// Builds every planned buffer at version `version`, publishes them,
    /// completes the version and retires what they replaced. Returns the
    /// version.
    pub(super) fn publish<'a>(
        &self,
        guard: &Guard,
        plan: Plan<'a>,
        version: WriteVersion<'_>,
    ) -> u64 {
        let v = version.get();
        let mut built = Vec::with_capacity(plan.nodes.len());
        for n in plan.nodes {
            let buf = match n.content {
                Content::Leaf(mut entries) => {
                    // The written item is the one entry without a version yet
                    // (versions start at 1).
                    for e in entries.iter_mut().filter(|e| e.version == 0) {
                        e.version = v;
                    }
                    build::build_leaf(&self.g, &self.shared.counter, &entries, v, n.lid, n.right)
                }
                Content::Interior(children, level) => {
                    build::build_interior(&self.g, &self.shared.counter, &children, v, n.lid, level)
                }
            };
            if let Some(old) = n.replaces {
                buf.header().old.store(old.as_raw(), CoreOrdering::Relaxed);
            }
            built.push((n.lid, buf, n.replaces));
        }
        let mut anchors = Vec::new();
        for &(lid, old) in &plan.kills {
            let d = build::build_dead(&self.g, &self.shared.counter, v, lid);
            d.header().old.store(old.as_raw(), CoreOrdering::Relaxed);
            anchors.push((lid, d, old));
        }
        // Fresh LIDs first (unreachable until a parent names them), then the
        // replaced ones; readers at versions < v never look past the old
        // buffers, and readers at >= v start only after the release below.
        for &(lid, buf, replaces) in built.iter().filter(|b| b.2.is_none()) {
            debug_assert!(replaces.is_none());
            self.pages.set(lid, Some(buf));
        }
        for &(lid, buf, _) in built.iter().filter(|b| b.2.is_some()) {
            self.pages.set(lid, Some(buf));
        }
        for &(lid, d, _) in &anchors {
            self.pages.set(lid, Some(d));
        }
        // Old buffers become obsolete (writers that reach them restart), then
        // the new ones open.
        plan.held.make_obsolete();
        for &(_, buf, _) in &built {
            crate::tree::unlock_new(buf);
        }
        version.complete();
        for (lid, _, replaces) in built {
            if let Some(old) = replaces {
                self.retire_after(guard, old, lid, v, false);
            }
        }
        for (lid, d, _) in anchors {
            // The anchor's older buffer is retired like any replaced buffer;
            // the anchor itself waits until nothing older remains.
            let old = d.old().expect("anchor has an older buffer");
            self.retire_after(guard, old, lid, v, false);
            self.retire_after(guard, d, lid, v, true);
        }
        v
    }
}
