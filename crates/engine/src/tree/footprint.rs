//! Where a store's bytes go: a walk over the current nodes, their older
//! versions, the page table and the node arena, sorting every byte into
//! one part (docs/experiments.md, "Bytes per record"). A measuring tool,
//! not a hot path: it pins the epoch and visits every buffer.

use super::Tree;
use super::node::{self, NodePtr};
use crate::config::{HEADER_BYTES, LOG_DIR_BYTES};

/// The bytes of a store, part by part. The parts add up to `total`, what
/// the node arena and the page table hold (out-of-line values are not
/// included: [`MemoryUsage::value_bytes`](crate::MemoryUsage) counts those).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Items in current leaves' sorted blocks.
    pub sorted_items: u64,
    /// Items in current leaves' log blocks.
    pub log_items: u64,
    /// Current leaves.
    pub leaves: u64,
    /// Current interior nodes.
    pub interior_nodes: u64,
    /// Key bytes of sorted-block items.
    pub key_bytes: u64,
    /// Inline value bytes of sorted-block items.
    pub value_bytes: u64,
    /// The rest of each sorted-block item: its header, expiry, client
    /// flags and out-of-line value pointer.
    pub item_header_bytes: u64,
    /// Log block bytes in use (whole log items, headers included).
    pub log_bytes: u64,
    /// Node headers and leaves' log directories.
    pub node_header_bytes: u64,
    /// Shortcut blocks of leaves.
    pub shortcut_bytes: u64,
    /// Bytes of current leaf buffers past their published size: the room a
    /// leaf keeps for its log and for the items a merge adds.
    pub leaf_free_bytes: u64,
    /// Whole buffers of current interior nodes.
    pub interior_bytes: u64,
    /// Whole buffers of older versions still linked from a current one
    /// (kept for readers and snapshots until reclamation frees them) and
    /// of dead nodes' anchors.
    pub old_buffer_bytes: u64,
    /// Freed buffers kept in the arena for reuse.
    pub free_list_bytes: u64,
    /// Arena bytes that are no buffer: the line between buffers and the
    /// unused tail of the newest chunk.
    pub arena_gap_bytes: u64,
    /// Buffers allocated and not yet freed that no LID reaches: replaced
    /// ones waiting for their grace period.
    pub retired_bytes: u64,
    /// The page table's directory and chunks.
    pub page_table_bytes: u64,
}

impl Footprint {
    /// Every part together.
    pub fn total(&self) -> u64 {
        self.key_bytes
            + self.value_bytes
            + self.item_header_bytes
            + self.log_bytes
            + self.node_header_bytes
            + self.shortcut_bytes
            + self.leaf_free_bytes
            + self.interior_bytes
            + self.old_buffer_bytes
            + self.free_list_bytes
            + self.arena_gap_bytes
            + self.retired_bytes
            + self.page_table_bytes
    }

    /// The parts by name, in the order of the breakdown table.
    pub fn parts(&self) -> [(&'static str, u64); 13] {
        [
            ("key bytes", self.key_bytes),
            ("value bytes (inline)", self.value_bytes),
            ("item headers", self.item_header_bytes),
            ("log blocks in use", self.log_bytes),
            ("node headers and log directories", self.node_header_bytes),
            ("leaf shortcut blocks", self.shortcut_bytes),
            ("leaf room past the published size", self.leaf_free_bytes),
            ("interior nodes", self.interior_bytes),
            ("older versions linked from a node", self.old_buffer_bytes),
            (
                "retired buffers waiting for their grace",
                self.retired_bytes,
            ),
            ("freed buffers kept for reuse", self.free_list_bytes),
            ("arena gaps and chunk tail", self.arena_gap_bytes),
            ("page table", self.page_table_bytes),
        ]
    }
}

impl Tree {
    /// Walks the store and sorts its bytes into a [`Footprint`].
    pub(crate) fn footprint(&self) -> Footprint {
        let g = &self.g;
        let counter = &self.shared.counter;
        let _guard = self.epochs.pin();
        let mut f = Footprint::default();
        let mut linked = 0u64;
        for (_, head) in self.pages.entries() {
            self.count_current(head, &mut f);
            linked += node_bytes(g, head) as u64;
            let mut old = head.old();
            while let Some(p) = old {
                f.old_buffer_bytes += node_bytes(g, p) as u64;
                linked += node_bytes(g, p) as u64;
                old = p.old();
            }
        }
        let arena = counter.arena_bytes();
        f.free_list_bytes = arena.free;
        f.arena_gap_bytes = arena.mapped - arena.carved;
        // Saturating: writers running beside the walk may free what it counted.
        f.retired_bytes = counter.live_bytes().saturating_sub(linked);
        f.page_table_bytes = self.pages.bytes() as u64;
        f
    }

    /// Adds a current node's bytes to `f` (a dead node's anchor counts as
    /// an old version: it holds no items).
    fn count_current(&self, p: NodePtr, f: &mut Footprint) {
        let g = &self.g;
        let h = p.header();
        let bytes = node_bytes(g, p) as u64;
        if h.flags & node::NODE_DEAD != 0 {
            f.old_buffer_bytes += bytes;
            return;
        }
        if !p.is_leaf() {
            f.interior_nodes += 1;
            f.interior_bytes += bytes;
            return;
        }
        f.leaves += 1;
        let state = p.load_state();
        let size = node::state_size(state);
        // SAFETY: `size` was loaded from the buffer's state and the epoch is
        // pinned (node invariants 2 and 3).
        let buf = unsafe { p.bytes(size) };
        let (start, end) = (h.sorted_start as usize, h.sorted_end as usize);
        let mut at = start;
        while at < end {
            let item = node::decode_item(buf, at, false);
            let inline = match item.value {
                node::ValueRef::Inline(v) => v.len(),
                node::ValueRef::External(..) => 0,
            };
            f.sorted_items += 1;
            f.key_bytes += item.key.len() as u64;
            f.value_bytes += inline as u64;
            f.item_header_bytes += (item.len as usize - item.key.len() - inline) as u64;
            at += item.len as usize;
        }
        f.log_items += node::state_log_count(state) as u64;
        f.log_bytes += (size - end) as u64;
        f.node_header_bytes += (HEADER_BYTES + LOG_DIR_BYTES) as u64;
        f.shortcut_bytes += (start - HEADER_BYTES - LOG_DIR_BYTES) as u64;
        f.leaf_free_bytes += bytes - size as u64;
    }
}

/// Bytes the buffer `p` takes in the arena.
fn node_bytes(g: &crate::config::Geometry, p: NodePtr) -> usize {
    p.capacity(g)
}

#[cfg(test)]
mod tests {
    use crate::tree::write::tests::{put, tree};

    /// The parts cover the arena and the page table exactly, and the items
    /// counted are the keys stored.
    #[test]
    fn parts_add_up_to_the_arena_and_count_every_item() {
        let t = tree();
        let n = 5_000u64;
        for i in 0..n {
            let k = i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes();
            put(&t, &k, &i.to_le_bytes());
        }
        let f = t.footprint();
        assert_eq!(f.sorted_items + f.log_items, n, "{f:?}");
        assert_eq!(f.key_bytes, 8 * f.sorted_items, "{f:?}");
        assert_eq!(f.value_bytes, 8 * f.sorted_items, "{f:?}");
        let arena = t.shared.counter.arena_bytes();
        assert_eq!(f.total(), arena.mapped + t.pages.bytes() as u64, "{f:?}");
        assert!(f.leaves > 1 && f.interior_nodes >= 1, "{f:?}");
    }
}
