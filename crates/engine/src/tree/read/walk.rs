//! A leaf in key order (Honeycomb 4.3): the sorted block walked with the
//! log's back-pointer groups merged in, at one read version.

use super::order_hint::{LogOrder, first_bp_from};
use super::published_leaf;
use super::search::last_le;
use crate::tree::node::{self, ITEM_DUP, ITEM_REPLACES, ItemRef, NodePtr, decode_item};

/// Where a leaf walk starts.
#[derive(Clone, Copy, Debug)]
pub(crate) enum WalkFrom<'k> {
    /// At the leaf's first key.
    First,
    /// At the first key `>= k` (or a little before it).
    Key(&'k [u8]),
    /// At the sorted-block item at this offset (with the new keys that sort
    /// just before it): what `Key` would find, when the caller has already
    /// searched the leaf (`segment_lower_bound`).
    Offset(usize),
}

impl<'k> WalkFrom<'k> {
    /// Where a forward scan from `start` begins in the leaf that holds it.
    pub(crate) fn start_of(start: std::ops::Bound<&'k [u8]>) -> WalkFrom<'k> {
        match start {
            std::ops::Bound::Included(k) | std::ops::Bound::Excluded(k) => WalkFrom::Key(k),
            std::ops::Bound::Unbounded => WalkFrom::First,
        }
    }
}

/// Calls `f` with the newest version visible at `rv` of every key in `leaf`
/// (delete markers and expired items included), in key order, starting
/// where `from` says, until `f` returns false. Returns false if `f` stopped
/// the walk.
///
/// Honeycomb 4.3: the log block is put in key order with its order hints and
/// merged with the sorted block through its back pointers; no key is
/// compared except to find where to start.
pub(crate) fn leaf_walk(
    leaf: NodePtr,
    rv: u64,
    from: WalkFrom<'_>,
    mut f: impl FnMut(ItemRef<'static>) -> bool,
) -> bool {
    let (buf, nlog) = published_leaf(leaf);
    let h = leaf.header();
    let sorted_end = h.sorted_end as usize;
    let mut off = match from {
        WalkFrom::First => node::sorted_start_of(h),
        WalkFrom::Key(k) => {
            last_le(buf, h, k, true).map_or(node::sorted_start_of(h), |(o, len, _)| o + len)
        }
        WalkFrom::Offset(o) => o,
    };
    // Where the walk next meets log items: their back pointers are sorted
    // offsets (or the sorted block's end), and only items with a back
    // pointer at or past the start can come after it.
    let mut next_bp = first_bp_from(buf, nlog, off as u32);
    loop {
        let s = (off < sorted_end).then(|| decode_item(buf, off, false));
        if next_bp == off as u32 {
            let group;
            (group, next_bp) = LogOrder::at_bp(buf, nlog, next_bp);
            if !walk_group(buf, rv, &group, s, &mut f) {
                return false;
            }
        } else if let Some(s) = s
            && !f(s)
        {
            return false;
        }
        match s {
            Some(s) => off += s.len as usize,
            None => {
                debug_assert_eq!(next_bp, u32::MAX, "every log item belongs to a group");
                return true;
            }
        }
    }
}

/// One back pointer's log items (`group`, in key order) and the sorted
/// item `sorted` they sort before or replace (None past the sorted
/// block's end): calls `f` with each new key's newest version visible at
/// `rv`, then with the sorted item's (its newest replacement, or itself).
/// False if `f` stopped the walk.
fn walk_group(
    buf: &'static [u8],
    rv: u64,
    group: &LogOrder,
    sorted: Option<ItemRef<'static>>,
    f: &mut impl FnMut(ItemRef<'static>) -> bool,
) -> bool {
    let n = group.n;
    // The newest of candidates `from..to` visible at rv (they come in
    // version order), else `base`.
    let pick = |base: Option<ItemRef<'static>>, from: usize, to: usize| {
        (from..to)
            .rev()
            .map(|j| decode_item(buf, group.at(j) as usize, true))
            .find(|it| it.version <= rv)
            .or(base)
    };
    let mut j = 0;
    // New keys, each with its DUP versions.
    while j < n && group.flags(j) & ITEM_REPLACES == 0 {
        let start = j;
        j += 1;
        while j < n && group.flags(j) & ITEM_DUP != 0 {
            j += 1;
        }
        if let Some(it) = pick(None, start, j)
            && !f(it)
        {
            return false;
        }
    }
    debug_assert!(
        j == n || sorted.is_some(),
        "replacements point at a sorted item"
    );
    match pick(sorted, j, n) {
        Some(it) => f(it),
        None => true,
    }
}
