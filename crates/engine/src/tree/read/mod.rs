//! Wait-free reads (Honeycomb 3.3): a reader holds one read version, follows
//! old-version chains to the buffer that version sees, and ignores log items
//! newer than it. Nothing here locks, waits or retries.
//!
//! - `search`: the search of one node through its shortcut block
//! - `order_hint`: a leaf's log in key order by its order hints (`LogOrder`)
//! - `walk`: a leaf in key order, sorted block and log together
//! - `hot`: stamps of a key's place in its leaf, for the hot-entry cache

mod hot;
mod order_hint;
mod search;
mod walk;

pub(crate) use hot::{HotStamp, Proven};
#[cfg(test)]
pub(crate) use order_hint::first_bp_from;
pub(crate) use order_hint::{LogOrder, MAX_LOG_ITEMS};
pub(crate) use search::{
    SegSearch, confirm_tie, find_group, find_in_group_tied, find_segment, interior_child,
    learned_window, route, scan_segment, search_lines, segment_lower_bound, settle,
};
pub(crate) use walk::{WalkFrom, leaf_walk};

use std::cmp::Ordering as Cmp;

use super::Tree;
use super::node::{
    self, ItemRef, Lid, NodePtr, decode_item, key_cmp, key_fp, log_dir_entry, log_dir_fp,
    state_log_count, state_size,
};
use crate::types::Now;
use search::{interior_seek, segment_seek};

/// Where a descent goes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Seek<'k> {
    /// The leaf whose range holds the key.
    Key(&'k [u8]),
    /// The leaf whose range holds the keys just below this one.
    Before(&'k [u8]),
    /// The rightmost leaf.
    Last,
}

/// The published bytes of a buffer.
pub(crate) fn published(p: NodePtr) -> &'static [u8] {
    published_leaf(p).0
}

/// The published bytes of a buffer and its published log count (0 for
/// interior nodes).
pub(crate) fn published_leaf(p: NodePtr) -> (&'static [u8], usize) {
    let state = p.load_state();
    // SAFETY: the size was just loaded from the buffer's state (invariant
    // 2). The 'static lifetime is a lie the callers keep honest: they only
    // hold these slices while pinned, which keeps the buffer alive
    // (invariant 3).
    let buf = unsafe { p.bytes(state_size(state)) };
    (buf, state_log_count(state))
}

impl Tree {
    /// The buffer of `lid` that read version `rv` sees.
    pub(crate) fn resolve(&self, lid: Lid, rv: u64) -> NodePtr {
        let mut p = self.pages.get(lid).expect("reachable LID is mapped");
        while p.version() > rv {
            p = p
                .old()
                .expect("old-version chain reaches every live read version");
        }
        p
    }

    /// Descends at `rv` to the leaf `seek` names; also returns the leaf's low
    /// fence (the separator of its range, None for the leftmost leaf).
    pub(crate) fn descend(&self, seek: Seek<'_>, rv: u64) -> (NodePtr, Option<&'static [u8]>) {
        let mut p = self.resolve(Lid::ROOT, rv);
        let mut fence = None;
        // Each node's first lines are asked for at once: the search reads
        // several of them, and their misses then overlap.
        node::prefetch_range(p, 0, node::head_bytes(&self.g));
        while !p.is_leaf() {
            let buf = published(p);
            let (child, sep) = interior_seek(p, buf, seek);
            if sep.is_some() {
                fence = sep;
            }
            p = self.resolve(child, rv);
            node::prefetch_range(p, 0, node::head_bytes(&self.g));
        }
        (p, fence)
    }

    /// The newest item for `key` in `leaf` visible at `rv` (maybe a delete
    /// marker or expired: the caller decides).
    pub(crate) fn leaf_get(&self, leaf: NodePtr, key: &[u8], rv: u64) -> Option<ItemRef<'static>> {
        let (buf, nlog) = published_leaf(leaf);
        let seg = find_segment(buf, leaf.header(), key, false);
        leaf_get_in(buf, nlog, seg, key, rv)
    }

    /// The cache lines a descent to `key` at `rv` reads, interior nodes
    /// and the leaf apart (`search_lines`). The caller holds an epoch pin.
    pub(crate) fn lookup_lines(&self, key: &[u8], rv: u64) -> (usize, usize) {
        let mut p = self.resolve(Lid::ROOT, rv);
        let mut interior = 0;
        while !p.is_leaf() {
            let buf = published(p);
            interior += search_lines(p, buf, key);
            p = self.resolve(search::route(p, buf, key), rv);
        }
        (interior, search_lines(p, published(p), key))
    }

    /// Point lookup at `rv`.
    pub(crate) fn get_at(&self, key: &[u8], rv: u64) -> Option<ItemRef<'static>> {
        let (leaf, _) = self.descend(Seek::Key(key), rv);
        self.leaf_get(leaf, key, rv)
    }
}

/// `leaf_get` with the segment already found (published bytes `buf` with
/// `nlog` log items). Log items are found through the directory: only those
/// whose fingerprint matches are opened.
pub(crate) fn leaf_get_in(
    buf: &'static [u8],
    nlog: usize,
    seg: Option<(usize, usize)>,
    key: &[u8],
    rv: u64,
) -> Option<ItemRef<'static>> {
    leaf_get_matches(buf, log_fp_matches(buf, nlog, key_fp(key)), seg, key, rv)
}

/// The log directory entries (of the first `nlog`) whose fingerprint is
/// `fp`, as a bit mask: bit `i` for entry `i`. Reads the directory line only.
#[inline]
pub(crate) fn log_fp_matches(buf: &[u8], nlog: usize, fp: u8) -> u32 {
    let mut mask = 0;
    for i in 0..nlog.min(crate::config::LOG_DIR_MAX) {
        mask |= u32::from(log_dir_fp(buf, i) == fp) << i;
    }
    mask
}

/// `leaf_get_in` with the directory entries to open already found
/// (`log_fp_matches`).
#[inline]
pub(crate) fn leaf_get_matches(
    buf: &'static [u8],
    mut matches: u32,
    seg: Option<(usize, usize)>,
    key: &[u8],
    rv: u64,
) -> Option<ItemRef<'static>> {
    let mut best = seg
        .map(|(from, to)| segment_seek(buf, from, to, key))
        .and_then(|(at, found)| found.then(|| decode_item(buf, at, false)));
    // Entries are in arrival order, which is version order.
    while matches != 0 {
        let i = matches.trailing_zeros() as usize;
        matches &= matches - 1;
        let it = decode_item(buf, log_dir_entry(buf, i).at as usize, true);
        if it.version <= rv && key_cmp(it.key, key) == Cmp::Equal {
            best = Some(it);
        }
    }
    best
}

/// The live items of a leaf visible at `rv`, in key order.
pub(crate) fn leaf_ordered(leaf: NodePtr, rv: u64, now: &Now, out: &mut Vec<ItemRef<'static>>) {
    leaf_walk(leaf, rv, WalkFrom::First, |it| {
        if it.is_live(now) {
            out.push(it);
        }
        true
    });
}
