//! The node header (offset 0 of every buffer), its packed state word, and
//! where a node's blocks start.

use std::sync::atomic::{AtomicPtr, AtomicU64};

use crate::config::{Geometry, HEADER_BYTES, LOG_DIR_BYTES};

/// A logical node id: the index of a page-table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Lid(pub u64);

impl Lid {
    /// "No node": the right sibling of the rightmost leaf.
    pub(crate) const NONE: Lid = Lid(u64::MAX);
    /// The root keeps its LID forever; growth and shrinkage replace its buffer.
    pub(crate) const ROOT: Lid = Lid(0);
}

/// The node header, at offset 0 of every buffer. Its atomics are core atomics
/// on purpose: they live inside raw buffers and need a fixed layout (see
/// `crate::sync` for the schedule points shuttle tests add around them).
#[repr(C)]
pub(crate) struct Header {
    /// Packed: published size (bits 0..24), log directory entries (24..32),
    /// sequence number (32..62), lock bit (62), obsolete bit (63). One word
    /// so that a log append publishes size, entry, sequence and unlock with
    /// a single store.
    pub state: AtomicU64,
    /// The write version that created this buffer.
    pub version: u64,
    /// The buffer this one replaced (the previous version of the node), or null.
    pub old: AtomicPtr<u8>,
    /// The version of the write that replaced this buffer; 0 while current.
    pub replaced_at: AtomicU64,
    pub lid: u64,
    /// Leaf: right sibling LID (`Lid::NONE` if rightmost). Interior: leftmost child.
    pub link: u64,
    /// End of the sorted block (start of the log block).
    pub sorted_end: u32,
    /// 0 for leaves.
    pub level: u8,
    pub flags: u8,
    /// At most `SHORTCUTS_PER_LINE * MAX_SHORTCUT_GROUPS` (48).
    pub nshortcuts: u8,
    /// The buffer's size class: it is `class` units (`class_unit`) long
    /// (`node::buffer`, "Size classes"). Set by `NodePtr::alloc`, never
    /// changed.
    pub class: u8,
    /// Number of items in the sorted block.
    pub nitems: u32,
    /// Offset of the first sorted-block byte (after the shortcut block;
    /// nodes are at most 64 KiB).
    pub sorted_start: u16,
    /// Length of the prefix every sorted-block key shares. Shortcut
    /// prefixes hold the 8 key bytes after it, so they tell keys apart even
    /// when all keys start alike (`user:000000...`).
    pub prefix_skip: u16,
}

const _: () = assert!(std::mem::size_of::<Header>() == HEADER_BYTES);

/// Header flag: the node was removed from the tree by the write at `version`;
/// the buffer only anchors the LID's chain of older buffers.
pub(crate) const NODE_DEAD: u8 = 1;
/// Header flag (leaves): some sorted-block item holds its value out of
/// line. Set before the buffer is published; `free` walks the sorted block
/// for values to release only when it is set.
pub(crate) const NODE_EXTERNAL: u8 = 2;
/// Header flag (interior nodes): the shortcut block's top line holds a
/// learned model (`node::learned`) instead of the groups' first prefixes.
pub(crate) const NODE_LEARNED: u8 = 4;
/// Shuttle builds never return buffers to the allocator: `free` sets this
/// flag instead, and every reader access asserts it is clear, so a schedule
/// that lets a reader touch a freed buffer fails deterministically.
#[cfg(feature = "shuttle")]
pub(crate) const NODE_POISONED: u8 = 0x80;

pub(crate) const STATE_LOCKED: u64 = 1 << 62;
pub(crate) const STATE_OBSOLETE: u64 = 1 << 63;
const SEQ_SHIFT: u32 = 32;
const SEQ_MASK: u64 = (1 << 30) - 1;

const LOG_COUNT_SHIFT: u32 = 24;

pub(crate) fn state_size(state: u64) -> usize {
    (state & 0xff_ffff) as usize
}
/// Published log directory entries (log items).
pub(crate) fn state_log_count(state: u64) -> usize {
    ((state >> LOG_COUNT_SHIFT) & 0xff) as usize
}
pub(crate) fn state_seq(state: u64) -> u64 {
    (state >> SEQ_SHIFT) & SEQ_MASK
}
/// The unlocked state word that follows a log append: new size, one more
/// log item, sequence + 1.
pub(crate) fn state_appended(state: u64, new_size: usize) -> u64 {
    let seq = (state_seq(state) + 1) & SEQ_MASK;
    let count = state_log_count(state) as u64 + 1;
    (seq << SEQ_SHIFT) | (count << LOG_COUNT_SHIFT) | new_size as u64
}

/// Offset of the shortcut block of a node at `level`: after the header, and
/// in leaves after the log directory.
pub(crate) fn shortcut_base(level: u8) -> usize {
    if level == 0 {
        HEADER_BYTES + LOG_DIR_BYTES
    } else {
        HEADER_BYTES
    }
}

/// Offset of the first sorted-block byte of a node at `level`.
pub(crate) fn sorted_start(g: &Geometry, level: u8) -> usize {
    shortcut_base(level) + g.shortcut_bytes
}

/// Offset of the first sorted-block byte of a published buffer.
pub(crate) fn sorted_start_of(h: &Header) -> usize {
    h.sorted_start as usize
}

/// Bytes a search of any node reads first: the header, a leaf's log
/// directory and the shortcut block.
pub(crate) fn head_bytes(g: &Geometry) -> usize {
    HEADER_BYTES + LOG_DIR_BYTES + g.shortcut_bytes
}
