//! The writer's one pass over its locked leaf: the key's newest item and
//! where a log item for it goes.

use crate::tree::node::{
    ItemRef, LOG_META_DUP, LOG_META_REPLACES, LOG_META_TOMBSTONE, NodePtr, decode_item, key_cmp,
    leaf_item_key, log_dir_entry,
};
use crate::tree::read::{find_segment, published_leaf, scan_segment};

/// What a writer learns about its key in one pass over the locked leaf.
pub(super) struct Lookup {
    /// The key's newest item, any version.
    pub(super) current: Option<ItemRef<'static>>,
    /// Where a log item for the key points into the sorted block.
    pub(super) backptr: u32,
    /// The back pointer names an item with this key.
    pub(super) replaces: bool,
    /// Order hint: log items whose key sorts at or before this one.
    pub(super) hint: usize,
    /// A log item already has this key (and it is not in the sorted block).
    pub(super) dup: bool,
    /// Estimated live keys in the leaf: sorted items, plus keys the log
    /// added, minus delete markers (exact unless a key was deleted twice).
    pub(super) live_estimate: isize,
}

pub(super) fn lookup(leaf: NodePtr, key: &[u8]) -> Lookup {
    let (buf, nlog) = published_leaf(leaf);
    let h = leaf.header();
    // The sorted-block segment is found now and scanned last: its lines
    // arrive while the log (prefetched by `traverse`) is searched.
    let seg = find_segment(buf, h, key, false);
    if let Some((from, to)) = seg {
        crate::tree::node::prefetch_range(leaf, from, to);
    }
    // One pass over the log in arrival order: the order hint is the number
    // of log keys at or before this one, and of equal keys the last to
    // arrive is the newest. (At most a dozen items: comparing each costs
    // less than putting the log in key order to binary-search it.)
    let mut hint = 0;
    let mut newest = None;
    let mut live_estimate = h.nitems as isize;
    for i in 0..nlog {
        let e = log_dir_entry(buf, i);
        if e.meta & LOG_META_TOMBSTONE != 0 {
            live_estimate -= 1;
        } else if e.meta & (LOG_META_REPLACES | LOG_META_DUP) == 0 {
            live_estimate += 1;
        }
        match key_cmp(leaf_item_key(buf, e.at as usize, true).0, key) {
            std::cmp::Ordering::Greater => {}
            std::cmp::Ordering::Less => hint += 1,
            std::cmp::Ordering::Equal => {
                hint += 1;
                newest = Some(e.at as usize);
            }
        }
    }
    let found = seg.and_then(|(from, to)| scan_segment(buf, true, from, to, key, false));
    let (mut current, backptr, replaces) = match found {
        Some((off, _, true)) => (Some(decode_item(buf, off, false)), off as u32, true),
        Some((off, len, false)) => (None, (off + len) as u32, false),
        None => (None, h.sorted_start as u32, false),
    };
    if let Some(at) = newest {
        current = Some(decode_item(buf, at, true));
    }
    Lookup {
        current,
        backptr,
        replaces,
        hint,
        dup: newest.is_some(),
        live_estimate,
    }
}
