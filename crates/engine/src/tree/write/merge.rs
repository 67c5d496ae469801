//! The common slow path: a leaf whose log is full merged with its log and
//! the new item into one fresh buffer for the same LID, streamed.

use std::sync::atomic::Ordering as CoreOrdering;

use super::lock::LockedLeaf;
use super::lookup::Lookup;
use super::{Step, WriteOp, fault};
use crate::config::Geometry;
use crate::tree::Tree;
use crate::tree::build::{Entry, LeafWriter};
use crate::tree::epoch::Guard;
use crate::tree::node::{
    ITEM_DUP, ITEM_REPLACES, ITEM_TOMBSTONE, Lid, NodePtr, ValueRef, leaf_item_key,
    log_item_sorted_len, sorted_version_field,
};
use crate::tree::read::{LogOrder, MAX_LOG_ITEMS, published_leaf};
use crate::tree::version::WriteVersion;

/// Marks the item being written among the log items of a streaming merge.
const NEW_ITEM: u32 = u32::MAX;

/// One key's log items in a streaming merge: at sorted offset `bp`,
/// replacing the sorted item there (`replaced`: its length; 0 for a new
/// key), the group's `newest` item (a log offset or `NEW_ITEM`) is written,
/// `len` bytes as a sorted item (0: a delete marker, nothing written).
#[derive(Clone, Copy, Default)]
struct MergeGroup {
    bp: usize,
    replaced: usize,
    newest: u32,
    len: usize,
}

/// Finds the groups of a merge and the merged size, exactly: each key's
/// log items are adjacent in key order (a group: a new key's items, or
/// those replacing one sorted item), and the merge keeps a group's newest,
/// the last to arrive (nothing if a delete marker), in place of the sorted
/// item it replaces. `order` is the log with the write (`NEW_ITEM`, whose
/// entry is `new_entry`, None for a delete) in it; `sorted_bytes` the
/// sorted block's size. Fills `groups`; returns how many, and the merged
/// sorted block's size. (A bound from the log's raw size would send leaves
/// near capacity to the slow path though their merge fits.)
#[inline(always)]
fn merge_groups(
    g: &Geometry,
    buf: &[u8],
    order: &LogOrder,
    sorted_bytes: usize,
    new_entry: &Option<Entry<'_>>,
    groups: &mut [MergeGroup; MAX_LOG_ITEMS],
) -> (usize, usize) {
    let n = order.n;
    let mut ngroups = 0;
    let mut size = sorted_bytes;
    let mut j = 0;
    while j < n {
        let (bp, replaces) = (order.bp(j) as usize, order.flags(j) & ITEM_REPLACES != 0);
        j += 1;
        while j < n
            && if replaces {
                order.bp(j) as usize == bp && order.flags(j) & ITEM_REPLACES != 0
            } else {
                order.flags(j) & ITEM_DUP != 0
            }
        {
            j += 1;
        }
        let newest = order.at(j - 1);
        let replaced = if replaces {
            leaf_item_key(buf, bp, false).1
        } else {
            0
        };
        let len = match newest {
            NEW_ITEM => new_entry.map_or(0, |e| e.sorted_len(g)),
            x if buf[x as usize] & ITEM_TOMBSTONE != 0 => 0,
            x => log_item_sorted_len(buf, x as usize),
        };
        size = size - replaced + len;
        groups[ngroups] = MergeGroup {
            bp,
            replaced,
            newest,
            len,
        };
        ngroups += 1;
    }
    (ngroups, size)
}

impl Tree {
    /// The common slow path: the locked leaf's sorted block, its log and the
    /// write merge into one fresh buffer for the same LID, streamed item by
    /// item (unchanged sorted items copied as raw bytes). At the writer's view
    /// only each key's newest item counts, so no version comparison is
    /// needed. None when the result might not fit one node, or would be
    /// underfull (the planner then splits or merges nodes). Returns the
    /// buffer (version not yet set) and the new item's offset.
    pub(super) fn merge_stream(
        &self,
        leaf: Step,
        key: &[u8],
        op: &WriteOp<'_>,
        look: &Lookup,
    ) -> Option<(NodePtr, Option<usize>)> {
        let g = &self.g;
        let (buf, nlog) = published_leaf(leaf.buf);
        let h = leaf.buf.header();
        let (sorted_start, sorted_end) = (h.sorted_start as usize, h.sorted_end as usize);
        let new_entry = match op {
            WriteOp::Put {
                value,
                expiry,
                flags,
            } => Some(Entry {
                key,
                value: ValueRef::Inline(value),
                version: 0,
                expiry: *expiry,
                cflags: *flags,
                raw: &[],
            }),
            WriteOp::Delete => None,
            WriteOp::Noop => unreachable!("no-op writes return early"),
        };
        // Log items in key order by order hint, the written item last in
        // arrival order (it is the newest), with back pointers and flags.
        let mut order = LogOrder::of(buf, nlog);
        let new_flags = if look.replaces {
            ITEM_REPLACES
        } else if look.dup {
            ITEM_DUP
        } else {
            0
        };
        order.insert(NEW_ITEM, look.hint, look.backptr, new_flags);
        let mut groups = [MergeGroup::default(); MAX_LOG_ITEMS];
        let sorted_bytes = sorted_end - sorted_start;
        let (ngroups, size) = merge_groups(g, buf, &order, sorted_bytes, &new_entry, &mut groups);
        if size > g.leaf_capacity {
            return None;
        }

        // Back pointers ascend with the groups: the sorted items between
        // two groups are copied as one run.
        let mut w = LeafWriter::new(g, &self.shared.counter, size);
        let mut new_at = None;
        let mut off = sorted_start;
        for gr in &groups[..ngroups] {
            debug_assert!(gr.bp >= off && gr.bp <= sorted_end, "back pointers ascend");
            if gr.bp > off {
                w.push_raw_run(&buf[off..gr.bp]);
                off = gr.bp;
            }
            match (gr.newest, &new_entry) {
                (NEW_ITEM, Some(e)) => new_at = Some(w.push(e)),
                (NEW_ITEM, None) => {}
                (x, _) if gr.len > 0 => {
                    let at = x as usize;
                    w.push_log_item(&buf[at..]);
                }
                _ => {}
            }
            off += gr.replaced;
        }
        if off < sorted_end {
            w.push_raw_run(&buf[off..sorted_end]);
        }
        debug_assert_eq!(w.bytes(), size, "merged size as computed");
        let underfull = w.bytes() < g.leaf_capacity / 4 && leaf.lid != Lid::ROOT;
        let p = w.finish(&self.shared.counter, 0, leaf.lid, Lid(h.link));
        if underfull {
            // SAFETY: never published; `free` drops the strong counts the
            // writer took for out-of-line values.
            unsafe { p.free(g, &self.shared.counter) };
            return None;
        }
        Some((p, new_at))
    }

    /// Publishes a streamed merge at version `v`: the leaf's LID now maps to
    /// `p`, whose old-version pointer is the leaf (`locked`, which becomes
    /// obsolete). Completes `v`.
    #[inline]
    pub(super) fn publish_merge(
        &self,
        guard: &Guard,
        leaf: Step,
        locked: LockedLeaf,
        p: NodePtr,
        new_at: Option<usize>,
        v: WriteVersion<'_>,
    ) {
        fault::point("merge");
        // SAFETY: `p` is unpublished and owned by this thread.
        unsafe {
            p.header_mut().version = v.get();
            if let Some(at) = new_at {
                // Built with version 0, so with the eight-byte field.
                let (field, width) = sorted_version_field(p.bytes(at + 1)[at]);
                debug_assert_eq!(width, 8);
                p.bytes_mut(at + field, at + field + 8)
                    .copy_from_slice(&v.get().to_le_bytes());
            }
        }
        p.header()
            .old
            .store(leaf.buf.as_raw(), CoreOrdering::Relaxed);
        self.pages.set(leaf.lid, Some(p));
        locked.make_obsolete();
        crate::tree::unlock_new(p);
        let v = v.complete();
        self.retire_after(guard, leaf.buf, leaf.lid, v, false);
    }
}
