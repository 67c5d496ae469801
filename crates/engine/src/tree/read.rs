//! Wait-free reads (Honeycomb 3.3): a reader holds one read version, follows
//! old-version chains to the buffer that version sees, and ignores log items
//! newer than it. Nothing here locks, waits or retries.

use std::cmp::Ordering as Cmp;

use super::Tree;
use super::node::{
    self, Header, ItemRef, LOG_META_DUP, LOG_META_REPLACES, Lid, NodePtr, ShortcutBlock,
    decode_interior, decode_item, key_cmp, key_fp, key_prefix, leaf_item_key, log_dir_entry,
    log_dir_fp, state_log_count, state_size,
};
use super::node::{ITEM_DUP, ITEM_REPLACES};
use crate::config::SHORTCUTS_PER_LINE;
use crate::types::Now;

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

/// A segment search in progress: the key, its 8-byte prefix after the
/// node's shared prefix, and whether the item sought must be `< key`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SegSearch<'k> {
    pub key: &'k [u8],
    pub kp: u64,
    pub strict: bool,
    /// Shortcuts whose prefix ties the key's are accepted without reading
    /// their keys (see `SegSearch::deferring`).
    pub defer_ties: bool,
}

impl<'k> SegSearch<'k> {
    /// Starts a search of a node with header `h`. Reads only the header:
    /// whether the key shares the node's prefix is settled later from the
    /// segment the search ends in (`settle`), which is read anyway.
    pub(crate) fn new(h: &Header, key: &'k [u8], strict: bool) -> SegSearch<'k> {
        let skip = (h.prefix_skip as usize).min(key.len());
        SegSearch {
            key,
            kp: key_prefix(&key[skip..]),
            strict,
            defer_ties: false,
        }
    }

    /// A non-strict search that accepts every shortcut whose prefix ties
    /// the key's without reading the shortcut's key: that read is a demand
    /// miss (the item lies in the segment, not yet fetched), and a key that
    /// is itself a segment's first key, common for reads of existing keys,
    /// ties. The segment found is then the last one whose prefix is `<=`
    /// the key's; `confirm_tie` checks it once its lines are in cache.
    pub(crate) fn deferring(h: &Header, key: &'k [u8]) -> SegSearch<'k> {
        SegSearch {
            defer_ties: true,
            ..SegSearch::new(h, key, false)
        }
    }

    /// Whether a shortcut with `prefix`, whose item is at `off`, is
    /// accepted (its key is `<= key`, `< key` if strict). Prefixes decide
    /// unless they tie; then the full key breaks the tie.
    #[inline]
    fn accepts(&self, buf: &[u8], leaf: bool, prefix: u64, off: impl Fn() -> usize) -> bool {
        if prefix != self.kp {
            return prefix < self.kp;
        }
        let c = key_cmp(sorted_key(buf, off(), leaf).0, self.key);
        c == Cmp::Less || (c == Cmp::Equal && !self.strict)
    }
}

/// How many of the first `n` of `prefixes` (ascending) are below `kp`,
/// and whether one of them equals it. A branch-free binary search: a line
/// holds at most eight, so three steps, each a conditional move.
#[inline]
fn count_below(prefixes: &[u64], n: usize, kp: u64) -> (usize, bool) {
    let valid = &prefixes[..n.min(prefixes.len())];
    let below = valid.partition_point(|&p| p < kp);
    (below, valid.get(below) == Some(&kp))
}

/// How many of the first `n` of a line's ascending `prefixes` are
/// accepted: those below the search prefix, then those that tie it and
/// whose key (at `offset(i)`) is accepted too.
#[inline(always)]
fn count_accepted(
    buf: &[u8],
    h: &Header,
    s: &SegSearch<'_>,
    prefixes: &[u64],
    n: usize,
    offset: impl Fn(usize) -> usize,
) -> usize {
    let (mut count, tie) = count_below(prefixes, n, s.kp);
    if tie && s.defer_ties {
        while count < n && prefixes[count] == s.kp {
            count += 1;
        }
    } else if tie {
        let leaf = h.level == 0;
        while count < n
            && prefixes[count] == s.kp
            && s.accepts(buf, leaf, prefixes[count], || offset(count))
        {
            count += 1;
        }
    }
    count
}

/// The group whose segments hold the item sought: the last group whose
/// first shortcut is accepted. Reads the top line (none if the node has a
/// single group). None if every item is greater.
#[inline(always)]
pub(crate) fn find_group(buf: &[u8], h: &Header, s: &SegSearch<'_>) -> Option<usize> {
    if h.nitems == 0 {
        return None;
    }
    let sc = ShortcutBlock::of(h);
    if !sc.has_top() {
        return Some(0);
    }
    // A group's first prefix stands for its first shortcut.
    let count = count_accepted(buf, h, s, &sc.top_prefixes(buf), sc.groups(), |g| {
        sc.get(buf, g * SHORTCUTS_PER_LINE).1
    });
    count.checked_sub(1)
}

/// The segment of group `g` that holds the item sought: (start, end).
/// Reads group `g`'s line only. None if every item is greater.
#[inline(always)]
pub(crate) fn find_in_group(
    buf: &[u8],
    h: &Header,
    s: &SegSearch<'_>,
    g: usize,
) -> Option<(usize, usize)> {
    find_in_group_tied(buf, h, s, g).0
}

/// `find_in_group`, and whether the segment's shortcut ties the key's
/// prefix. Shortcuts ascend, so with a deferring search
/// (`SegSearch::deferring`) the last one accepted ties exactly when some
/// tie was accepted unread: then `confirm_tie` must check the segment
/// before it is used.
#[inline(always)]
pub(crate) fn find_in_group_tied(
    buf: &[u8],
    h: &Header,
    s: &SegSearch<'_>,
    g: usize,
) -> (Option<(usize, usize)>, bool) {
    let sc = ShortcutBlock::of(h);
    let line = sc.group(buf, g);
    let n = sc.group_len(g);
    let count = count_accepted(buf, h, s, &line.prefixes, n, |i| line.offsets[i] as usize);
    // The segment: from its shortcut to the next one (or the group's end,
    // which follows the last offset in the line, so `n` indexes it).
    let Some(seg) = count.checked_sub(1) else {
        return (None, false);
    };
    let end = if seg + 1 < n {
        seg + 1
    } else {
        SHORTCUTS_PER_LINE
    };
    (
        Some((line.offsets[seg] as usize, line.offsets[end] as usize)),
        line.prefixes[seg] == s.kp,
    )
}

/// Checks a segment a deferring search accepted on a tie: its first key
/// must be `<= key`. If it is not (a key between two that share its
/// prefix, rare), the node is searched again, reading the tied keys. Call
/// it before `settle`, with the segment's lines in cache.
#[inline]
pub(crate) fn confirm_tie(
    buf: &[u8],
    h: &Header,
    key: &[u8],
    seg: Option<(usize, usize)>,
) -> Option<(usize, usize)> {
    let (from, _) = seg?;
    if key_cmp(sorted_key(buf, from, h.level == 0).0, key) == Cmp::Greater {
        return search_node(buf, h, &SegSearch::new(h, key, false));
    }
    seg
}

/// Corrects a segment search for a key that differs from the node's shared
/// prefix (the prefix comparisons then meant nothing): such a key lies
/// before or after every item. Reads the first key of the segment found
/// (or of the node), which the caller reads anyway.
#[inline(always)]
pub(crate) fn settle(
    buf: &[u8],
    h: &Header,
    key: &[u8],
    found: Option<(usize, usize)>,
) -> Option<(usize, usize)> {
    if h.prefix_skip == 0 || h.nitems == 0 {
        return found;
    }
    settle_skipped(buf, h, key, found)
}

/// `settle` for a node whose keys share a prefix.
fn settle_skipped(
    buf: &[u8],
    h: &Header,
    key: &[u8],
    found: Option<(usize, usize)>,
) -> Option<(usize, usize)> {
    let skip = h.prefix_skip as usize;
    let at = found.map_or(h.sorted_start as usize, |(from, _)| from);
    let first = sorted_key(buf, at, h.level == 0).0;
    let n = key.len().min(skip);
    // Nearly always the key shares the prefix: say so in two word compares
    // and order it byte by byte only when it does not.
    if same_head(key, first, n) {
        return if key.len() < skip { None } else { found };
    }
    match key_cmp(&key[..n], &first[..n]) {
        Cmp::Less => None,
        Cmp::Greater => Some(last_segment(buf, h)),
        Cmp::Equal if key.len() < skip => None,
        Cmp::Equal => found,
    }
}

/// Whether `a` and `b` agree on their first `n` bytes (both hold at least
/// `n`). Up to 16 bytes, with keys of eight bytes or more, in one or two
/// word compares (the second overlapping the first), not a byte loop.
#[inline(always)]
fn same_head(a: &[u8], b: &[u8], n: usize) -> bool {
    debug_assert!(a.len() >= n && b.len() >= n);
    if n <= 16 && a.len() >= 8 && b.len() >= 8 {
        let word =
            |s: &[u8], at: usize| u64::from_be_bytes(s[at..at + 8].try_into().expect("8 bytes"));
        if n >= 8 {
            return word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8);
        }
        // The first n bytes are the word's high ones.
        return n == 0 || (word(a, 0) ^ word(b, 0)) >> (64 - 8 * n) == 0;
    }
    a[..n] == b[..n]
}

/// The shortcut segment that holds the last sorted-block item with key
/// `<= key` (`< key` if `strict`): (segment start, segment end). None if
/// every item is greater. Reads the header, the top line, one group line
/// and the first key of the segment.
pub(crate) fn find_segment(
    buf: &[u8],
    h: &Header,
    key: &[u8],
    strict: bool,
) -> Option<(usize, usize)> {
    let found = search_node(buf, h, &SegSearch::new(h, key, strict));
    settle(buf, h, key, found)
}

/// The segment a search of the whole node ends in, before `settle`.
#[inline(always)]
fn search_node(buf: &[u8], h: &Header, s: &SegSearch<'_>) -> Option<(usize, usize)> {
    find_group(buf, h, s).and_then(|g| find_in_group(buf, h, s, g))
}

/// The last shortcut segment of a node with items.
fn last_segment(buf: &[u8], h: &Header) -> (usize, usize) {
    let sc = ShortcutBlock::of(h);
    (sc.get(buf, sc.n - 1).1, h.sorted_end as usize)
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
#[inline]
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

/// The first item of leaf segment `[from, to)` whose key is not below
/// `key` (else `to`), and whether its key is `key`. Sorted keys are unique
/// and ascend, so the scan stops there.
#[inline(always)]
fn segment_seek(buf: &[u8], from: usize, to: usize, key: &[u8]) -> (usize, bool) {
    let mut at = from;
    while at < to {
        let (k, len) = leaf_item_key(buf, at, false);
        match key_cmp(k, key) {
            Cmp::Less => at += len,
            c => return (at, c == Cmp::Equal),
        }
    }
    (to, false)
}

/// The child of an interior buffer for `key`, given the segment
/// `find_segment` chose (the read engine finds it one step earlier).
pub(crate) fn interior_child(
    p: NodePtr,
    buf: &[u8],
    seg: Option<(usize, usize)>,
    key: &[u8],
) -> Lid {
    let mut child = Lid(p.header().link);
    if let Some((from, to)) = seg {
        // The last item of the segment with key <= `key` routes it; its
        // child is read as the scan goes (same line), not decoded again.
        let mut at = from;
        while at < to {
            let (k, lid, len) = decode_interior(buf, at);
            if key_cmp(k, key) == Cmp::Greater {
                break;
            }
            child = lid;
            at += len;
        }
    }
    child
}

/// The child of interior buffer `p` (published bytes `buf`) for `key`,
/// searching the node whole: what `find_segment` and `interior_child` do in
/// turn, for a caller that has nothing to do between the two.
#[inline]
pub(crate) fn route(p: NodePtr, buf: &[u8], key: &[u8]) -> Lid {
    interior_child(p, buf, find_segment(buf, p.header(), key, false), key)
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
                let mut at = last_segment(buf, h).0;
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

/// The sorted-block offset a walk from `key` starts at, given the segment
/// a search of the leaf for `key` found (`find_segment`, not strict): the
/// first item of the segment whose key is `>= key`, else the segment's end;
/// the leaf's first item if the search found none.
#[inline]
pub(crate) fn segment_lower_bound(
    buf: &[u8],
    h: &Header,
    seg: Option<(usize, usize)>,
    key: &[u8],
) -> usize {
    seg.map_or(node::sorted_start_of(h), |(from, to)| {
        segment_seek(buf, from, to, key).0
    })
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::same_head;

    proptest! {
        /// Keys that share a head and then differ in a small alphabet, so
        /// that differences fall on every byte around the word edges.
        #[test]
        fn same_head_is_a_compare_of_the_first_bytes(
            common in proptest::collection::vec(any::<u8>(), 0..20),
            a_tail in proptest::collection::vec(0u8..3, 0..12),
            b_tail in proptest::collection::vec(0u8..3, 0..12),
            n in 0usize..32,
        ) {
            let a = [common.clone(), a_tail].concat();
            let b = [common, b_tail].concat();
            let n = n.min(a.len()).min(b.len());
            prop_assert_eq!(same_head(&a, &b, n), a[..n] == b[..n]);
        }
    }
}
