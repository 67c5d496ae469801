//! Order hints (Honeycomb figures 7 and 8): a leaf's log items in key
//! order, from the log directory alone, whole or one back pointer's group
//! at a time.

use crate::tree::node::{ITEM_DUP, ITEM_REPLACES, LOG_META_DUP, LOG_META_REPLACES, log_dir_entry};

/// Most log items a leaf can hold, plus one slot for the item a merge is
/// writing.
pub(crate) const MAX_LOG_ITEMS: usize = crate::config::LOG_DIR_MAX + 1;

/// A leaf's log items in key order (Honeycomb figure 8): item `i` in arrival
/// order is inserted at position `hint(i)`; back pointers and flags ride
/// along so walks need not decode items to group them. Each entry is one
/// word (offset, back pointer, flags), so an insertion moves one array.
pub(crate) struct LogOrder {
    entries: [u64; MAX_LOG_ITEMS],
    pub n: usize,
}

/// `ITEM_REPLACES` / `ITEM_DUP` from a directory entry's meta byte.
#[inline]
fn order_flags(meta: u8) -> u8 {
    (if meta & LOG_META_REPLACES != 0 {
        ITEM_REPLACES
    } else {
        0
    }) | if meta & LOG_META_DUP != 0 {
        ITEM_DUP
    } else {
        0
    }
}

/// The smallest back pointer at or past `bp` among a leaf's `nlog` log
/// items (`u32::MAX` if none): where a walk from sorted offset `bp` first
/// meets the log.
#[inline]
pub(crate) fn first_bp_from(buf: &[u8], nlog: usize, bp: u32) -> u32 {
    (0..nlog)
        .map(|i| log_dir_entry(buf, i).bp as u32)
        .filter(|&b| b >= bp)
        .min()
        .unwrap_or(u32::MAX)
}

/// Bits of a `LogOrder` entry: the item's offset (or a caller's marker, such
/// as a merge's new item) in the low 32, then the back pointer (nodes are at
/// most 64 KiB), then `ITEM_REPLACES` / `ITEM_DUP`.
const ORDER_BP_SHIFT: u32 = 32;
const ORDER_FLAGS_SHIFT: u32 = 48;

impl LogOrder {
    /// The log of published bytes `buf` with `nlog` log items, from its
    /// directory alone (no log item is read).
    pub(crate) fn of(buf: &[u8], nlog: usize) -> LogOrder {
        let mut o = LogOrder::empty();
        for i in 0..nlog {
            let e = log_dir_entry(buf, i);
            o.insert(e.at as u32, e.hint(), e.bp as u32, order_flags(e.meta));
        }
        o
    }

    /// The log items whose back pointer is `bp` (the versions of one key
    /// that replaces the sorted item at `bp`, and the new keys that sort
    /// just before it), in key order, and the smallest back pointer past
    /// `bp` (`u32::MAX` if none): what a walk needs when it reaches `bp`.
    ///
    /// Every item with a smaller back pointer sorts before every item of
    /// the group (its key is at most the sorted key at its back pointer; a
    /// group key is above the sorted key before `bp`), and every item with
    /// a greater one sorts after. So a group item's hint, less the items
    /// with smaller back pointers that arrived before it, is its hint
    /// within the group.
    pub(crate) fn at_bp(buf: &[u8], nlog: usize, bp: u32) -> (LogOrder, u32) {
        let mut o = LogOrder::empty();
        let (mut below, mut next) = (0, u32::MAX);
        for i in 0..nlog {
            let e = log_dir_entry(buf, i);
            let ebp = e.bp as u32;
            if ebp < bp {
                below += 1;
            } else if ebp > bp {
                next = next.min(ebp);
            } else {
                let hint = e.hint().saturating_sub(below);
                o.insert(e.at as u32, hint, ebp, order_flags(e.meta));
            }
        }
        (o, next)
    }

    fn empty() -> LogOrder {
        LogOrder {
            entries: [0; MAX_LOG_ITEMS],
            n: 0,
        }
    }

    /// Adds an item that arrived after all present ones.
    pub(crate) fn insert(&mut self, at: u32, hint: usize, bp: u32, flags: u8) {
        debug_assert!(bp <= u16::MAX as u32, "back pointers are node offsets");
        let (pos, n) = (hint.min(self.n), self.n);
        // At most a dozen entries: a loop beats a memmove call.
        for k in (pos..n).rev() {
            self.entries[k + 1] = self.entries[k];
        }
        self.entries[pos] =
            at as u64 | (bp as u64) << ORDER_BP_SHIFT | (flags as u64) << ORDER_FLAGS_SHIFT;
        self.n += 1;
    }

    /// Offset (or marker) of the item at position `j` in key order.
    #[inline]
    pub(crate) fn at(&self, j: usize) -> u32 {
        self.entries[j] as u32
    }

    /// Back pointer of the item at position `j`.
    #[inline]
    pub(crate) fn bp(&self, j: usize) -> u32 {
        (self.entries[j] >> ORDER_BP_SHIFT) as u16 as u32
    }

    /// `ITEM_REPLACES` / `ITEM_DUP` of the item at position `j`.
    #[inline]
    pub(crate) fn flags(&self, j: usize) -> u8 {
        (self.entries[j] >> ORDER_FLAGS_SHIFT) as u8
    }
}
