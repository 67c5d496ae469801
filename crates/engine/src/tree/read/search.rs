//! The search of one node (Honeycomb 3.1, "shortcut block"; docs/design.md,
//! "Node layout for a CPU"): the top line picks a group, the group line a
//! segment, and the segment is scanned; a key that differs from the node's
//! shared prefix is settled from the segment's first key.

use std::cmp::Ordering as Cmp;

use super::Seek;
use crate::config::SHORTCUTS_PER_LINE;
use crate::tree::node::{
    self, Header, Lid, NodePtr, ShortcutBlock, decode_interior, key_cmp, key_prefix, leaf_item_key,
};

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
    if h.flags & node::NODE_LEARNED != 0 {
        return learned_window(buf, h, s.kp);
    }
    find_group(buf, h, s).and_then(|g| find_in_group(buf, h, s, g))
}

/// The items of a learned node (`node::learned`) that hold the answer for
/// a key with prefix `kp`, as a segment: (start, end). Callers scan it as
/// they scan a shortcut segment; none of its items may qualify, when none
/// of the node's does. Reads the model line only.
#[inline(always)]
pub(crate) fn learned_window(buf: &[u8], h: &Header, kp: u64) -> Option<(usize, usize)> {
    if h.nitems == 0 {
        return None;
    }
    let (lo, hi, len) = node::line_window(buf, h, kp);
    let start = node::sorted_start_of(h);
    Some((start + lo * len, start + (hi + 1) * len))
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
pub(super) fn segment_seek(buf: &[u8], from: usize, to: usize, key: &[u8]) -> (usize, bool) {
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

/// The cache lines a search of node `p` for `key` reads, as the read
/// engine fetches them: the header (and a leaf's log directory), the top
/// or model line, the group line (not for a learned node) and the lines of
/// the segment or window it scans. A measure for benchmarks.
pub(crate) fn search_lines(p: NodePtr, buf: &[u8], key: &[u8]) -> usize {
    use crate::config::LINE_BYTES;
    let h = p.header();
    let lines = |from: usize, to: usize| {
        if to > from {
            (to - 1) / LINE_BYTES - from / LINE_BYTES + 1
        } else {
            0
        }
    };
    let head = node::shortcut_base(h.level) / LINE_BYTES + 1;
    let s = SegSearch::new(h, key, false);
    if h.flags & node::NODE_LEARNED != 0 {
        let (from, to) = learned_window(buf, h, s.kp).unwrap_or((0, 0));
        return head + lines(from, to);
    }
    let sc = ShortcutBlock::of(h);
    let group = find_group(buf, h, &s);
    let seg = group.and_then(|g| find_in_group(buf, h, &s, g));
    let group_line = usize::from(sc.has_top() && group.is_some());
    head + group_line + seg.map_or(0, |(from, to)| lines(from, to))
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
