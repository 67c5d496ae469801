//! Wait-free reads (Honeycomb 3.3): a reader holds one read version, follows
//! old-version chains to the buffer that version sees, and ignores log items
//! newer than it. Nothing here locks, waits or retries.

use std::cmp::Ordering as Cmp;

use super::node::{
    self, Header, ITEM_DUP, ITEM_REPLACES, ItemRef, Lid, NodePtr, decode_interior, decode_item,
    key_cmp, key_prefix, leaf_item_key, shortcut, state_size,
};
use super::{Now, Tree};

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

/// Key of the sorted-block item at `off` and the item's length.
#[inline]
fn sorted_key(buf: &[u8], off: usize, leaf: bool) -> (&[u8], usize) {
    if leaf {
        leaf_item_key(buf, off, false)
    } else {
        let (k, _, len) = decode_interior(buf, off);
        (k, len)
    }
}

/// The shortcut segment that holds the last sorted-block item with key
/// `<= key` (`< key` if `strict`): (segment start, segment end). None if every
/// item is greater. Reads only the header and the shortcut block.
pub(crate) fn find_segment(
    buf: &[u8],
    h: &Header,
    key: &[u8],
    strict: bool,
) -> Option<(usize, usize)> {
    let leaf = h.level == 0;
    if h.nitems == 0 {
        return None;
    }
    let ns = h.nshortcuts as usize;
    // Every key here starts with the same `skip` bytes; shortcut prefixes
    // hold the 8 bytes after them. A key that differs within the shared
    // prefix lies before or after all of them.
    let skip = h.prefix_skip as usize;
    let kp = if skip == 0 {
        key_prefix(key)
    } else {
        let first = sorted_key(buf, shortcut(buf, 0, ns).1 as usize, leaf).0;
        let n = key.len().min(skip);
        match key[..n].cmp(&first[..n]) {
            Cmp::Less => return None,
            Cmp::Greater => return Some(last_segment(buf, h, ns)),
            Cmp::Equal if key.len() < skip => return None,
            Cmp::Equal => key_prefix(&key[skip..]),
        }
    };
    // Whether shortcut `i`'s key is accepted (<= key, or < key if strict).
    // Prefixes decide unless they tie; then the full key breaks the tie.
    let accepted = |i: usize| {
        let (prefix, off) = shortcut(buf, i, ns);
        if prefix != kp {
            return prefix < kp;
        }
        let c = key_cmp(sorted_key(buf, off as usize, leaf).0, key);
        c == Cmp::Less || (c == Cmp::Equal && !strict)
    };
    // Branch-free search for the last accepted shortcut (the comparisons
    // are unpredictable; a conditional move beats a mispredicted branch).
    let (mut base, mut len) = (0usize, ns);
    while len > 1 {
        let half = len / 2;
        let mid = base + half;
        base = if accepted(mid) { mid } else { base };
        len -= half;
    }
    let lo = if accepted(base) { base + 1 } else { base };
    if lo == 0 {
        return None;
    }
    let seg = lo - 1;
    let start = shortcut(buf, seg, ns).1 as usize;
    let end = if seg + 1 < ns {
        shortcut(buf, seg + 1, ns).1 as usize
    } else {
        h.sorted_end as usize
    };
    Some((start, end))
}

/// The last shortcut segment of a node with items.
fn last_segment(buf: &[u8], h: &Header, ns: usize) -> (usize, usize) {
    (shortcut(buf, ns - 1, ns).1 as usize, h.sorted_end as usize)
}

/// The last sorted-block item with key `<= key` (`< key` if `strict`), via the
/// shortcut block: (offset, length, key equals). Touches the shortcuts and
/// one segment.
pub(crate) fn last_le(
    buf: &[u8],
    h: &Header,
    key: &[u8],
    strict: bool,
) -> Option<(usize, usize, bool)> {
    let (from, to) = find_segment(buf, h, key, strict)?;
    scan_segment(buf, h.level == 0, from, to, key, strict)
}

/// The last item of the segment `[from, to)` with key `<= key` (`< key`).
pub(crate) fn scan_segment(
    buf: &[u8],
    leaf: bool,
    from: usize,
    to: usize,
    key: &[u8],
    strict: bool,
) -> Option<(usize, usize, bool)> {
    let accept = |c: Cmp| c == Cmp::Less || (c == Cmp::Equal && !strict);
    let (mut at, mut best) = (from, None);
    while at < to {
        let (k, len) = sorted_key(buf, at, leaf);
        let c = key_cmp(k, key);
        if !accept(c) {
            break;
        }
        best = Some((at, len, c == Cmp::Equal));
        at += len;
    }
    best
}

/// The child of an interior buffer for `key`, given the segment
/// `find_segment` chose (the read engine finds it one step earlier).
pub(crate) fn interior_child(
    p: NodePtr,
    buf: &[u8],
    seg: Option<(usize, usize)>,
    key: &[u8],
) -> Lid {
    match seg.and_then(|(from, to)| scan_segment(buf, false, from, to, key, false)) {
        Some((off, ..)) => decode_interior(buf, off).1,
        None => Lid(p.header().link),
    }
}

/// The child an interior buffer routes `seek` to, and that child's low
/// separator (None for the leftmost child).
pub(crate) fn interior_seek<'b>(
    p: NodePtr,
    buf: &'b [u8],
    seek: Seek<'_>,
) -> (Lid, Option<&'b [u8]>) {
    let h = p.header();
    let hit = match seek {
        Seek::Key(k) => last_le(buf, h, k, false).map(|(o, ..)| o),
        Seek::Before(k) => last_le(buf, h, k, true).map(|(o, ..)| o),
        Seek::Last => {
            if h.nitems == 0 {
                None
            } else {
                let ns = h.nshortcuts as usize;
                let mut at = shortcut(buf, ns - 1, ns).1 as usize;
                let mut last = at;
                while at < h.sorted_end as usize {
                    last = at;
                    at += decode_interior(buf, at).2;
                }
                Some(last)
            }
        }
    };
    match hit {
        Some(off) => {
            let (k, child, _) = decode_interior(buf, off);
            (child, Some(k))
        }
        None => (Lid(h.link), None),
    }
}

/// The published bytes of a buffer.
pub(crate) fn published(p: NodePtr) -> &'static [u8] {
    let size = state_size(p.load_state());
    // SAFETY: `size` was just loaded from the buffer's state (invariant 2).
    // The 'static lifetime is a lie the callers keep honest: they only hold
    // these slices while pinned, which keeps the buffer alive (invariant 3).
    unsafe { p.bytes(size) }
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
        while !p.is_leaf() {
            let buf = published(p);
            let (child, sep) = interior_seek(p, buf, seek);
            if sep.is_some() {
                fence = sep;
            }
            p = self.resolve(child, rv);
        }
        (p, fence)
    }

    /// The newest item for `key` in `leaf` visible at `rv` (maybe a delete
    /// marker or expired: the caller decides).
    pub(crate) fn leaf_get(&self, leaf: NodePtr, key: &[u8], rv: u64) -> Option<ItemRef<'static>> {
        let buf = published(leaf);
        let seg = find_segment(buf, leaf.header(), key, false);
        leaf_get_in(leaf, buf, seg, key, rv)
    }

    /// Point lookup at `rv`.
    pub(crate) fn get_at(&self, key: &[u8], rv: u64) -> Option<ItemRef<'static>> {
        let (leaf, _) = self.descend(Seek::Key(key), rv);
        self.leaf_get(leaf, key, rv)
    }
}

/// `leaf_get` with the segment already found (published bytes `buf`).
pub(crate) fn leaf_get_in(
    leaf: NodePtr,
    buf: &'static [u8],
    seg: Option<(usize, usize)>,
    key: &[u8],
    rv: u64,
) -> Option<ItemRef<'static>> {
    let h = leaf.header();
    let mut best = match seg.and_then(|(from, to)| scan_segment(buf, true, from, to, key, false)) {
        Some((off, _, true)) => Some(decode_item(buf, off, false)),
        _ => None,
    };
    let mut at = h.sorted_end as usize;
    while at < buf.len() {
        let (k, len) = leaf_item_key(buf, at, true);
        if k.len() == key.len() && key_cmp(k, key) == Cmp::Equal {
            let it = decode_item(buf, at, true);
            if it.version <= rv {
                best = Some(it);
            }
        }
        at += len;
    }
    best
}

/// The live items of a leaf visible at `rv`, in key order.
pub(crate) fn leaf_ordered(leaf: NodePtr, rv: u64, now: &Now, out: &mut Vec<ItemRef<'static>>) {
    leaf_walk(leaf, rv, None, |it| {
        if it.is_live(now) {
            out.push(it);
        }
        true
    });
}

/// Most log items a leaf can hold (order hints are one byte), plus one slot
/// for the item a merge is writing.
const MAX_LOG_ITEMS: usize = 257;

/// A leaf's log items in key order (Honeycomb figure 8): item `i` in arrival
/// order is inserted at position `hint(i)`; back pointers and flags ride
/// along so walks need not decode items to group them.
pub(crate) struct LogOrder {
    pub at: [u32; MAX_LOG_ITEMS],
    pub bp: [u32; MAX_LOG_ITEMS],
    pub flags: [u8; MAX_LOG_ITEMS],
    pub n: usize,
}

impl LogOrder {
    /// The log block of published bytes `buf` starting at `sorted_end`.
    pub(crate) fn of(buf: &[u8], sorted_end: usize) -> LogOrder {
        let mut o = LogOrder {
            at: [0; MAX_LOG_ITEMS],
            bp: [0; MAX_LOG_ITEMS],
            flags: [0; MAX_LOG_ITEMS],
            n: 0,
        };
        let x = crate::config::ITEM_HEADER_BYTES;
        let mut at = sorted_end;
        while at < buf.len() {
            let bp = u32::from_le_bytes(buf[at + x..at + x + 4].try_into().expect("4 bytes"));
            let (_, len) = leaf_item_key(buf, at, true);
            o.insert(at as u32, buf[at + x + 4] as usize, bp, buf[at]);
            at += len;
        }
        o
    }

    /// Adds an item that arrived after all present ones.
    pub(crate) fn insert(&mut self, at: u32, hint: usize, bp: u32, flags: u8) {
        let (pos, n) = (hint.min(self.n), self.n);
        self.at.copy_within(pos..n, pos + 1);
        self.bp.copy_within(pos..n, pos + 1);
        self.flags.copy_within(pos..n, pos + 1);
        (self.at[pos], self.bp[pos], self.flags[pos]) = (at, bp, flags);
        self.n += 1;
    }
}

/// Calls `f` with the newest version visible at `rv` of every key in `leaf`
/// (delete markers and expired items included), in key order, starting at
/// the first key `>= from` (or a little before it), until `f` returns false.
/// Returns false if `f` stopped the walk.
///
/// Honeycomb 4.3: the log block is put in key order with its order hints and
/// merged with the sorted block through its back pointers; no key is
/// compared except to find where to start.
pub(crate) fn leaf_walk(
    leaf: NodePtr,
    rv: u64,
    from: Option<&[u8]>,
    mut f: impl FnMut(ItemRef<'static>) -> bool,
) -> bool {
    let buf = published(leaf);
    let h = leaf.header();
    let sorted_end = h.sorted_end as usize;
    // Log item offsets in key order: item i goes to position hint(i).
    let order = LogOrder::of(buf, sorted_end);
    let n = order.n;
    let log = |j: usize| decode_item(buf, order.at[j] as usize, true);
    // The newest candidate visible at rv: candidates come in version order.
    let pick = |base: Option<ItemRef<'static>>, from: usize, to: usize| {
        (from..to)
            .rev()
            .map(log)
            .find(|it| it.version <= rv)
            .or(base)
    };

    let mut off = node::sorted_start_of(h);
    if let Some(k) = from {
        if let Some((o, len, _)) = last_le(buf, h, k, true) {
            off = o + len;
        }
    }
    let mut j = 0;
    while j < n && order.bp[j] < off as u32 {
        j += 1;
    }
    // New keys (not in the sorted block) that sort before sorted offset `bp`.
    let new_keys = |bp: u32, j: &mut usize, f: &mut dyn FnMut(ItemRef<'static>) -> bool| {
        while *j < n {
            if order.bp[*j] != bp || order.flags[*j] & ITEM_REPLACES != 0 {
                break;
            }
            let start = *j;
            *j += 1;
            while *j < n && order.flags[*j] & ITEM_DUP != 0 {
                *j += 1;
            }
            if let Some(it) = pick(None, start, *j) {
                if !f(it) {
                    return false;
                }
            }
        }
        true
    };
    while off < sorted_end {
        let s = decode_item(buf, off, false);
        if !new_keys(off as u32, &mut j, &mut f) {
            return false;
        }
        let start = j;
        while j < n && order.bp[j] == off as u32 {
            j += 1;
        }
        if let Some(it) = pick(Some(s), start, j) {
            if !f(it) {
                return false;
            }
        }
        off += s.len as usize;
    }
    if !new_keys(sorted_end as u32, &mut j, &mut f) {
        return false;
    }
    debug_assert_eq!(j, n, "every log item belongs to a group");
    true
}
