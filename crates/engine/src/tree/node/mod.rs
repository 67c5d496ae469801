//! Node buffers: the fixed-size byte layout of Honeycomb section 3.1.
//!
//! ```text
//!  0        64         128 (leaf)                        sorted_start        sorted_end        size   node_size
//!  +--------+----------+---------------------------------+-------------------+-----------------+------+
//!  | header | log dir  | shortcut block                  | sorted block      | log block       | free |
//!  |        | (leaves) |                                 |                   | (leaves)        |      |
//!  +--------+----------+---------------------------------+-------------------+-----------------+------+
//! ```
//!
//! The layout is planned in cache lines, because on a CPU a lookup costs
//! about one memory access per distinct line it touches (see docs/design.md,
//! "Node layout for a CPU"):
//!
//! - **Log directory** (leaves, the line after the header): one 6-byte entry
//!   per log item in arrival order: offset, back pointer, a one-byte key
//!   fingerprint, and the order hint with the item's REPLACES/DUP/TOMBSTONE
//!   flags. A point read checks fingerprints and opens only the log items
//!   that match; a scan orders the log from the directory alone. Its entry
//!   count is published in the state word with the size.
//! - **Shortcut block**: groups of up to six shortcuts, one group per line
//!   (six 8-byte key prefixes, then six 2-byte offsets). With more than one
//!   group, a top line before them holds each group's first prefix, so a
//!   search reads the top line, one group line and one segment.
//!
//! This module is the one place raw node bytes are read and written. The
//! invariants that make that sound:
//!
//! 1. A buffer is written only by the thread that allocated it until it is
//!    published (a release store into the page table or an `old` pointer).
//! 2. After publication, header fields other than `state`, `old` and
//!    `replaced_at` never change, and bytes below the published size (the low
//!    24 bits of `state`) never change, except log directory entries at or
//!    past the published log count (bits 24..32). A log append writes its
//!    item beyond the published size and its directory entry past the
//!    published count while holding the node lock, then publishes size and
//!    count with one release store; readers load `state` with acquire and
//!    read only below the size and count they loaded.
//! 3. A buffer is freed only through `tree::reclaim`, after no reader can
//!    reach it (see docs/design.md, "Why reclamation is safe").
//!
//! - `header`: the header, its state word, and the layout's offsets
//! - `item`: leaf and interior item encoding
//! - `key`: key order, prefixes and fingerprints
//! - `shortcut_block`: the shortcut block (Honeycomb's ShortcutBlock)
//! - `learned`: a learned model in place of an interior node's top line
//! - `log_block`: the log block's directory (Honeycomb's LogBlock)
//! - `buffer`: buffer memory and `NodePtr`, the accessors of a buffer
//! - `value`: out-of-line values, shared by buffers and readers

mod buffer;
mod header;
mod item;
mod key;
mod learned;
mod log_block;
mod shortcut_block;
pub(crate) mod value;

#[cfg(test)]
pub(crate) use buffer::class_unit;
pub(crate) use buffer::{BufferCounter, NodePtr};
pub use buffer::{live_buffers_global, live_external_values_global};
pub(crate) use header::{
    Header, Lid, NODE_DEAD, NODE_EXTERNAL, NODE_LEARNED, STATE_LOCKED, STATE_OBSOLETE, head_bytes,
    shortcut_base, sorted_start, sorted_start_of, state_appended, state_log_count, state_size,
};
pub(crate) use item::{
    INTERIOR_ITEM_FIXED, ITEM_DUP, ITEM_EXTERNAL, ITEM_REPLACES, ITEM_TOMBSTONE, ItemRef, ValueRef,
    decode_interior, decode_item, encode_item, item_len, leaf_item_key, log_item_sorted_len,
    sorted_item_len, sorted_version_field,
};
#[cfg(test)]
pub(crate) use item::{ITEM_SHORT_LENS, ITEM_VERSION32};
pub(crate) use key::{key_cmp, key_fp, key_prefix, prefix_skip};
pub(crate) use learned::{Model, line_window};
pub(crate) use log_block::{
    LOG_META_DUP, LOG_META_EXTERNAL, LOG_META_HINT, LOG_META_REPLACES, LOG_META_TOMBSTONE,
    LogDirEntry, log_dir_entry, log_dir_fp,
};
pub(crate) use shortcut_block::ShortcutBlock;
pub use value::{ReceivedValue, ValueBuf, ValueOffer, adopted_values_global};

use crate::config::LINE_BYTES;

pub(super) fn rd_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
pub(super) fn rd_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub(super) fn rd_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Asks for the cache line holding `p`.
#[inline(always)]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Asks for the cache lines of `[from, to)` of a buffer, all at once, so
/// that their misses overlap.
#[inline(always)]
pub(crate) fn prefetch_range(base: NodePtr, from: usize, to: usize) {
    let mut at = from & !(LINE_BYTES - 1);
    while at < to {
        prefetch(base.as_raw().wrapping_add(at));
        at += LINE_BYTES;
    }
}
