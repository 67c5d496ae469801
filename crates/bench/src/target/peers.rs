//! The in-process peers of `docs/workloads.md`: `BTreeMap` behind a `RwLock`,
//! crossbeam's `SkipMap` and scc's `TreeIndex`, plus a Masstree (the
//! `masstree` crate), each used the way its API makes cheapest for a caller
//! that looks at values without keeping them.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;

use crossbeam_skiplist::SkipMap;
use masstree::{MassTree15, RangeBound};
use parking_lot::RwLock;

use super::Target;
use crate::{BenchError, Result};

/// A `BTreeMap` behind a `parking_lot::RwLock`.
#[derive(Debug, Default)]
pub struct BTreeMapTarget {
    map: RwLock<BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl BTreeMapTarget {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Target for BTreeMapTarget {
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        // Allocate outside the lock.
        let (key, value) = (key.to_vec(), value.to_vec());
        self.map.write().insert(key, value);
        Ok(())
    }

    fn read(&self, key: &[u8], visit: &mut dyn FnMut(&[u8])) -> Result<bool> {
        let map = self.map.read();
        Ok(map.get(key).map(|v| visit(v)).is_some())
    }

    fn range(&self, start: &[u8], n: usize, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize> {
        let map = self.map.read();
        Ok(visit_all(
            map.range::<[u8], _>((Bound::Included(start), Bound::Unbounded))
                .take(n),
            visit,
        ))
    }

    fn range_floor(
        &self,
        lo: &[u8],
        hi: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let map = self.map.read();
        let start = floor_start(
            map.range::<[u8], _>((Bound::Unbounded, Bound::Included(lo)))
                .next_back()
                .map(|(k, _)| &k[..]),
            lo,
        );
        Ok(visit_all(
            map.range::<[u8], _>((Bound::Included(start), Bound::Included(hi))),
            visit,
        ))
    }
}

/// A `crossbeam_skiplist::SkipMap` whose values sit behind a lock.
///
/// Why the lock: in crossbeam-skiplist 0.1.3 (the latest release) an insert
/// that replaces an existing key lets a concurrent `get` miss the key
/// altogether (crossbeam-rs/crossbeam#1023, fixed upstream after 0.1.3), and
/// the bench's checks catch that as a lost record on every workload with
/// updates. The maintainers' suggestion for mutable values is a lock inside
/// the value (crossbeam-rs/crossbeam#318), so overwrites replace the value in
/// place and the skip list itself only ever gains keys.
#[derive(Debug, Default)]
pub struct SkipMapTarget {
    map: SkipMap<Vec<u8>, RwLock<Vec<u8>>>,
}

impl SkipMapTarget {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Target for SkipMapTarget {
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let value = value.to_vec();
        match self.map.get(key) {
            Some(e) => *e.value().write() = value,
            None => {
                // A racing insert of the same key may win; then overwrite it.
                let mut fresh = Some(value);
                let e = self.map.get_or_insert_with(key.to_vec(), || {
                    RwLock::new(fresh.take().unwrap_or_default())
                });
                if let Some(v) = fresh {
                    *e.value().write() = v;
                }
            }
        }
        Ok(())
    }

    fn read(&self, key: &[u8], visit: &mut dyn FnMut(&[u8])) -> Result<bool> {
        Ok(self
            .map
            .get(key)
            .map(|e| visit(&e.value().read()))
            .is_some())
    }

    fn range(&self, start: &[u8], n: usize, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize> {
        let iter = self
            .map
            .range::<[u8], _>((Bound::Included(start), Bound::Unbounded))
            .take(n);
        Ok(visit_entries(iter, visit))
    }

    fn range_floor(
        &self,
        lo: &[u8],
        hi: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let floor = self.map.upper_bound(Bound::Included(lo));
        let start = floor_start(floor.as_ref().map(|e| &e.key()[..]), lo);
        let iter = self
            .map
            .range::<[u8], _>((Bound::Included(start), Bound::Included(hi)));
        Ok(visit_entries(iter, visit))
    }
}

/// An `scc::TreeIndex`. Its values are immutable once inserted, so an
/// overwrite is `upsert_sync`, which swaps in a new entry.
#[derive(Default)]
pub struct SccTarget {
    map: scc::TreeIndex<Vec<u8>, Vec<u8>>,
}

impl SccTarget {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }
}

impl fmt::Debug for SccTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SccTarget")
            .field("len", &self.map.len())
            .finish()
    }
}

impl Target for SccTarget {
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.map.upsert_sync(key.to_vec(), value.to_vec());
        Ok(())
    }

    fn read(&self, key: &[u8], visit: &mut dyn FnMut(&[u8])) -> Result<bool> {
        Ok(self.map.peek_with(key, |_, v| visit(v)).is_some())
    }

    fn range(&self, start: &[u8], n: usize, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize> {
        let guard = scc::Guard::new();
        let lower = self.lower_bound(start, &guard);
        let iter = self
            .map
            .range::<[u8], _>((lower, Bound::Unbounded), &guard)
            .take(n);
        Ok(visit_all(iter, visit))
    }

    fn range_floor(
        &self,
        lo: &[u8],
        hi: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let guard = scc::Guard::new();
        let floor = self
            .map
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(lo)), &guard)
            .next_back()
            .map(|(k, _)| &k[..]);
        // The floor is an existing key; with none, `lo` is below every key,
        // and an unbounded start avoids scc's slow case (see `lower_bound`).
        let lower = floor.map_or(Bound::Unbounded, Bound::Included);
        let iter = self
            .map
            .range::<[u8], _>((lower, Bound::Included(hi)), &guard);
        Ok(visit_all(iter, visit))
    }
}

impl SccTarget {
    /// The lower bound to give `TreeIndex::range` for keys `>= start`.
    /// scc 3.8's range is pathologically slow when its lower bound lies
    /// below the smallest key (measured: ~10 s for the first 1,001 items of
    /// 200 K keys inserted in random order, growing faster than the size;
    /// a bound at an existing key or an unbounded start takes ~30 µs). Such a range is the same as one with no lower bound, so
    /// that is what it gets: one look at the first key (a leftmost descent
    /// on a path that stays in cache) decides.
    fn lower_bound<'a>(&self, start: &'a [u8], guard: &scc::Guard) -> Bound<&'a [u8]> {
        match self.map.iter(guard).next() {
            Some((first, _)) if start <= &first[..] => Bound::Unbounded,
            _ => Bound::Included(start),
        }
    }
}

/// The longest key the `masstree` crate takes (it panics on longer ones).
const MASSTREE_MAX_KEY: usize = 256;

/// The `masstree` crate's `MassTree15` (0.9): a Rust Masstree, a trie of
/// B+trees with optimistic, lock-free reads. Values are boxed out of line,
/// as C++ Masstree keeps them; an overwrite swaps in a new box.
pub struct MasstreeTarget {
    map: MassTree15<Vec<u8>>,
}

impl MasstreeTarget {
    /// An empty tree.
    pub fn new() -> Self {
        Self {
            map: MassTree15::new(),
        }
    }

    /// Shows `visit` the first `n` items from `start` to `end`, in key
    /// order; returns how many it showed.
    fn visit_scan(
        &self,
        start: RangeBound<'_>,
        end: RangeBound<'_>,
        n: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> usize {
        if n == 0 {
            return 0;
        }
        let guard = self.map.guard();
        let mut count = 0;
        self.map.scan(
            start,
            end,
            |k, v| {
                visit(k, &v[..]);
                count += 1;
                count < n
            },
            &guard,
        );
        count
    }
}

impl Default for MasstreeTarget {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MasstreeTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MasstreeTarget").finish_non_exhaustive()
    }
}

fn masstree_key(key: &[u8]) -> Result<&[u8]> {
    if key.len() > MASSTREE_MAX_KEY {
        return Err(BenchError(format!(
            "masstree takes keys of at most {MASSTREE_MAX_KEY} bytes, not {}",
            key.len()
        )));
    }
    Ok(key)
}

impl Target for MasstreeTarget {
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let key = masstree_key(key)?;
        let guard = self.map.guard();
        self.map.insert_with_guard(key, value.to_vec(), &guard);
        Ok(())
    }

    fn read(&self, key: &[u8], visit: &mut dyn FnMut(&[u8])) -> Result<bool> {
        let key = masstree_key(key)?;
        let guard = self.map.guard();
        Ok(self
            .map
            .get_with_guard(key, &guard)
            .map(|v| visit(&v[..]))
            .is_some())
    }

    fn range(&self, start: &[u8], n: usize, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize> {
        let start = masstree_key(start)?;
        Ok(self.visit_scan(RangeBound::Included(start), RangeBound::Unbounded, n, visit))
    }

    fn range_floor(
        &self,
        lo: &[u8],
        hi: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let (lo, hi) = (masstree_key(lo)?, masstree_key(hi)?);
        let guard = self.map.guard();
        // The floor: the first key of a descending walk from `lo`, copied
        // out of the walk's callback into a buffer that fits any key.
        let mut buf = [0u8; MASSTREE_MAX_KEY];
        let mut floor_len = None;
        self.map.scan_rev_batch(
            RangeBound::Unbounded,
            RangeBound::Included(lo),
            |k, _| {
                buf[..k.len()].copy_from_slice(k);
                floor_len = Some(k.len());
                false
            },
            &guard,
        );
        let start = floor_start(floor_len.map(|n| &buf[..n]), lo);
        Ok(self.visit_scan(
            RangeBound::Included(start),
            RangeBound::Included(hi),
            usize::MAX,
            visit,
        ))
    }
}

/// Where a floor range starts: the floor key, or `lo` itself when no key is
/// `<= lo` (the range then begins at the first key `>= lo`).
fn floor_start<'a>(floor: Option<&'a [u8]>, lo: &'a [u8]) -> &'a [u8] {
    floor.unwrap_or(lo)
}

fn visit_all<'a>(
    iter: impl Iterator<Item = (&'a Vec<u8>, &'a Vec<u8>)>,
    visit: &mut dyn FnMut(&[u8], &[u8]),
) -> usize {
    let mut count = 0;
    for (k, v) in iter {
        visit(k, v);
        count += 1;
    }
    count
}

fn visit_entries<'a>(
    iter: impl Iterator<Item = crossbeam_skiplist::map::Entry<'a, Vec<u8>, RwLock<Vec<u8>>>>,
    visit: &mut dyn FnMut(&[u8], &[u8]),
) -> usize {
    let mut count = 0;
    for e in iter {
        visit(e.key(), &e.value().read());
        count += 1;
    }
    count
}
