//! Ordered scans at one read version: forward along right-sibling links,
//! backward by re-descending to the leaf left of the current leaf's low fence.
//! At a fixed read version the tree is immutable, so both directions see one
//! consistent snapshot however writers split and merge meanwhile.

use std::ops::Bound;

use std::cmp::Ordering;

use super::Tree;
use super::node::{ItemRef, Lid, NodePtr, key_cmp};
use super::read::{Seek, WalkFrom, find_segment, leaf_ordered, leaf_walk, published};
use crate::types::Now;

fn after_end(key: &[u8], end: Bound<&[u8]>) -> bool {
    match end {
        Bound::Included(e) => key_cmp(key, e) == Ordering::Greater,
        Bound::Excluded(e) => key_cmp(key, e) != Ordering::Less,
        Bound::Unbounded => false,
    }
}

fn before_start(key: &[u8], start: Bound<&[u8]>) -> bool {
    match start {
        Bound::Included(s) => key_cmp(key, s) == Ordering::Less,
        Bound::Excluded(s) => key_cmp(key, s) != Ordering::Greater,
        Bound::Unbounded => false,
    }
}

/// True if no key can lie between the bounds.
pub(crate) fn empty_bounds(start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
    match (start, end) {
        (Bound::Included(s), Bound::Included(e)) => s > e,
        (Bound::Included(s) | Bound::Excluded(s), Bound::Excluded(e))
        | (Bound::Excluded(s), Bound::Included(e)) => s >= e,
        _ => false,
    }
}

impl Tree {
    /// Calls `f` with every live item between the bounds visible at `rv`, in
    /// key order (descending if `reverse`), until `f` returns false.
    pub(crate) fn scan(
        &self,
        rv: u64,
        now: &Now,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        reverse: bool,
        mut f: impl FnMut(ItemRef<'static>) -> bool,
    ) {
        if empty_bounds(start, end) {
            return;
        }
        if !reverse {
            let seek = match start {
                Bound::Included(k) | Bound::Excluded(k) => Seek::Key(k),
                Bound::Unbounded => Seek::Key(&[]),
            };
            let (leaf, _) = self.descend(seek, rv);
            self.scan_from_leaf(leaf, rv, now, start, end, WalkFrom::start_of(start), &mut f);
        } else {
            let seek = match end {
                Bound::Included(k) | Bound::Excluded(k) => Seek::Key(k),
                Bound::Unbounded => Seek::Last,
            };
            let (mut leaf, mut fence) = self.descend(seek, rv);
            let mut items = Vec::new();
            let mut previous_fence: Option<&[u8]> = None;
            loop {
                // Each step left must land on a leaf strictly below the last.
                debug_assert!(
                    previous_fence.is_none_or(|p| fence.is_none_or(|f| f < p)),
                    "reverse scan did not move left at version {rv}: fence {fence:?} after {previous_fence:?}"
                );
                previous_fence = fence;
                items.clear();
                leaf_ordered(leaf, rv, now, &mut items);
                for it in items.iter().rev() {
                    if after_end(it.key, end) {
                        continue;
                    }
                    if before_start(it.key, start) || !f(*it) {
                        return;
                    }
                }
                match fence {
                    None => return,
                    Some(low) => {
                        if before_start(low, start) {
                            return;
                        }
                        (leaf, fence) = self.descend(Seek::Before(low), rv);
                    }
                }
            }
        }
    }

    /// The forward part of `scan`, from the leaf that holds the start bound
    /// (the read engine descends to it on its own), starting in it where
    /// `from` says (`WalkFrom::start_of(start)`, or an offset the caller's
    /// own search of the leaf found).
    #[expect(
        clippy::too_many_arguments,
        reason = "a scan's read version, clock, bounds and start point"
    )]
    pub(crate) fn scan_from_leaf(
        &self,
        mut leaf: NodePtr,
        rv: u64,
        now: &Now,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        mut from: WalkFrom<'_>,
        mut f: impl FnMut(ItemRef<'static>) -> bool,
    ) {
        // Invariant 6: keys strictly ascend along the leaf chain at one version.
        let mut last: Option<&[u8]> = None;
        // So once one key is past the start, every later one is too.
        let mut started = matches!(start, Bound::Unbounded);
        loop {
            let more = leaf_walk(leaf, rv, from, |it| {
                debug_assert!(
                    last.is_none_or(|l| l < it.key),
                    "leaf chain out of order at version {rv}: {:?} after {:?}",
                    it.key,
                    last
                );
                last = Some(it.key);
                if !started {
                    if before_start(it.key, start) {
                        return true;
                    }
                    started = true;
                }
                if !it.is_live(now) {
                    return true;
                }
                !after_end(it.key, end) && f(it)
            });
            if !more {
                return;
            }
            from = WalkFrom::First;
            let right = Lid(leaf.header().link);
            if right == Lid::NONE {
                return;
            }
            leaf = self.resolve(right, rv);
        }
    }

    /// Calls `f` with the items of a range request at `rv` (floor start and
    /// limit applied) until it returns false; returns how many it saw. The
    /// one implementation of range semantics, for the store and the read engine.
    pub(crate) fn visit_range(
        &self,
        r: &crate::types::Range,
        rv: u64,
        now: &Now,
        f: &mut dyn FnMut(ItemRef<'static>) -> bool,
    ) -> usize {
        let limit = r.limit.unwrap_or(usize::MAX);
        let mut seen = 0;
        if limit == 0 {
            return 0;
        }
        let mut start = r.start.as_ref().map(|k| &k[..]);
        if r.floor_start
            && let Bound::Included(k) = start
            && let Some(f) = self.floor_at(k, rv, now)
        {
            start = Bound::Included(f.key);
        }
        let end = r.end.as_ref().map(|k| &k[..]);
        self.scan(rv, now, start, end, r.reverse, |it| {
            seen += 1;
            f(it) && seen < limit
        });
        seen
    }

    /// The greatest live key `<= key` at `rv`.
    pub(crate) fn floor_at(&self, key: &[u8], rv: u64, now: &Now) -> Option<ItemRef<'static>> {
        // Fast path: walk forward from the shortcut segment that holds `key`
        // and keep the last live item `<= key`. Everything the walk skips
        // sorts before what it visits, so a candidate found is the floor.
        let (leaf, _) = self.descend(Seek::Key(key), rv);
        let buf = published(leaf);
        if let Some((seg_from, _)) = find_segment(buf, leaf.header(), key, false) {
            let mut found = None;
            leaf_walk(leaf, rv, WalkFrom::Offset(seg_from), |it| {
                if key_cmp(it.key, key) == Ordering::Greater {
                    return false;
                }
                if it.is_live(now) {
                    found = Some(it);
                }
                true
            });
            if found.is_some() {
                return found;
            }
        }
        // Nothing live there: scan backwards (earlier in the leaf, or
        // earlier leaves).
        let mut out = None;
        self.scan(
            rv,
            now,
            Bound::Unbounded,
            Bound::Included(key),
            true,
            |it| {
                out = Some(it);
                false
            },
        );
        out
    }
}

/// An expired item a sweep found: its key and version.
pub(crate) type Expired = (Vec<u8>, u64);

impl Tree {
    /// Up to `max_items` keys after `cursor` (from the start if None), in key
    /// order at `rv`, with the keys among them that expired by `now`.
    /// Returns (expired keys, last key visited).
    pub(crate) fn expired_after(
        &self,
        rv: u64,
        now: &Now,
        cursor: Option<&[u8]>,
        max_items: usize,
    ) -> (Vec<Expired>, Option<Vec<u8>>) {
        let start = cursor.map_or(Bound::Unbounded, Bound::Excluded);
        let seek = cursor.map_or(Seek::Key(&[]), Seek::Key);
        let (mut leaf, _) = self.descend(seek, rv);
        let (mut expired, mut last, mut seen) = (Vec::new(), None, 0);
        loop {
            let mut done = false;
            leaf_walk(
                leaf,
                rv,
                cursor.map_or(WalkFrom::First, WalkFrom::Key),
                |it| {
                    if it.is_tombstone() || before_start(it.key, start) {
                        return true;
                    }
                    if it.expiry != 0 && it.expiry <= now.ms() {
                        expired.push((it.key.to_vec(), it.version));
                    }
                    seen += 1;
                    if seen >= max_items {
                        last = Some(it.key.to_vec());
                        done = true;
                    }
                    !done
                },
            );
            let right = Lid(leaf.header().link);
            if done || right == Lid::NONE {
                return (expired, last);
            }
            leaf = self.resolve(right, rv);
        }
    }
}
