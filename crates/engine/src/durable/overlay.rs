//! Delta runs composed in memory and merged with a base checkpoint as it
//! streams past: what recovery bulk loads and what background compaction
//! writes as the next base. Runs are small (they hold what changed); the
//! base is never held whole.

use std::collections::BTreeMap;

use super::delta::Entry;
use super::record::CkptItem;

/// An item owned by the overlay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OwnedItem {
    pub version: u64,
    pub expiry: u64,
    pub client_flags: u32,
    pub value: Vec<u8>,
}

/// A key range `[lo, hi)` (hi None: unbounded; lo empty: from the first key).
pub(crate) type KeyRange = (Vec<u8>, Option<Vec<u8>>);

/// One delta run, read whole and verified before it touches an overlay.
#[derive(Debug, Default, Clone)]
pub(crate) struct Run {
    ranges: Vec<KeyRange>,
    keys: Vec<(Vec<u8>, Option<OwnedItem>)>,
}

impl Run {
    /// Adds the next entry of a run (in the run's order).
    pub(crate) fn push(&mut self, e: &Entry<'_>) {
        match *e {
            Entry::Put(ref it) => self.keys.push((
                it.key.to_vec(),
                Some(OwnedItem {
                    version: it.version,
                    expiry: it.expiry,
                    client_flags: it.client_flags,
                    value: it.value.to_vec(),
                }),
            )),
            Entry::Del(key) => self.keys.push((key.to_vec(), None)),
            Entry::Range { lo, hi } => self.ranges.push((lo.to_vec(), hi.map(<[u8]>::to_vec))),
        }
    }
}

/// The runs applied so far, newest winning: the newest entry of each key,
/// and the ranges in which every base key is hidden.
#[derive(Debug, Default)]
pub(crate) struct Overlay {
    keys: BTreeMap<Vec<u8>, Option<OwnedItem>>,
    /// Disjoint, ascending, and not touching.
    ranges: Vec<KeyRange>,
}

impl Overlay {
    /// Applies `run` on top of the runs before it.
    pub(crate) fn apply(&mut self, run: Run) {
        // A range replaces everything older inside it: drop the older
        // entries there, then its own items come in with the keys.
        for (lo, hi) in &run.ranges {
            let mut tail = self.keys.split_off(&lo[..]);
            if let Some(hi) = hi {
                let mut after = tail.split_off(&hi[..]);
                self.keys.append(&mut after);
            }
        }
        self.keys.extend(run.keys);
        let mut all = std::mem::take(&mut self.ranges);
        all.extend(run.ranges);
        all.sort_by(|a, b| a.0.cmp(&b.0));
        for (lo, hi) in all {
            match self.ranges.last_mut() {
                // Overlapping or touching the last one: extend it.
                Some((_, last_hi)) if last_hi.as_ref().is_none_or(|h| *h >= lo) => {
                    if last_hi.is_some() && hi.as_ref().is_none_or(|h| Some(h) > last_hi.as_ref()) {
                        *last_hi = hi;
                    }
                }
                _ => self.ranges.push((lo, hi)),
            }
        }
    }

    /// A merge of this overlay with a base streamed in key order.
    pub(crate) fn merge(&self) -> Merge<'_> {
        Merge {
            keys: self.keys.iter().peekable(),
            ranges: &self.ranges,
            at: 0,
        }
    }
}

/// The state a base plus an overlay make, produced as the base streams
/// past (`base`, then `finish`).
pub(crate) struct Merge<'o> {
    keys: std::iter::Peekable<std::collections::btree_map::Iter<'o, Vec<u8>, Option<OwnedItem>>>,
    ranges: &'o [KeyRange],
    /// The first range whose high bound is above the keys seen so far.
    at: usize,
}

fn owned<'a>(key: &'a [u8], it: &'a OwnedItem) -> CkptItem<'a> {
    CkptItem {
        version: it.version,
        expiry: it.expiry,
        client_flags: it.client_flags,
        key,
        value: &it.value,
    }
}

impl<'o> Merge<'o> {
    fn hidden(&mut self, key: &[u8]) -> bool {
        while let Some((_, Some(hi))) = self.ranges.get(self.at)
            && hi[..] <= *key
        {
            self.at += 1;
        }
        self.ranges
            .get(self.at)
            .is_some_and(|(lo, _)| lo[..] <= *key)
    }

    /// Takes the next base item (keys ascending): hands `emit` every
    /// overlay item below it, then the item itself unless the overlay
    /// replaces or hides it.
    pub(crate) fn base<E>(
        &mut self,
        it: &CkptItem<'_>,
        emit: &mut impl FnMut(&CkptItem<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        while let Some((k, v)) = self.keys.peek() {
            match k[..].cmp(it.key) {
                std::cmp::Ordering::Less => {
                    if let Some(v) = v {
                        emit(&owned(k, v))?;
                    }
                    self.keys.next();
                }
                std::cmp::Ordering::Equal => {
                    if let Some(v) = v {
                        emit(&owned(k, v))?;
                    }
                    self.keys.next();
                    return Ok(());
                }
                std::cmp::Ordering::Greater => break,
            }
        }
        if self.hidden(it.key) {
            return Ok(());
        }
        emit(it)
    }

    /// After the last base item: the overlay items above it.
    pub(crate) fn finish<E>(
        mut self,
        emit: &mut impl FnMut(&CkptItem<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        for (k, v) in self.keys.by_ref() {
            if let Some(v) = v {
                emit(&owned(k, v))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Model = BTreeMap<Vec<u8>, u64>;

    fn key(n: u8) -> Vec<u8> {
        vec![b'a' + n]
    }

    fn item(v: u64) -> OwnedItem {
        OwnedItem {
            version: v,
            expiry: 0,
            client_flags: 0,
            value: v.to_le_bytes().to_vec(),
        }
    }

    /// Ranges (start, length in keys or to the end, item offsets in it),
    /// keys (key, put or delete), and the run's version.
    type RunSpec = (Vec<(u8, Option<u8>, Vec<u8>)>, Vec<(u8, bool)>, u64);

    /// A run as its writer would make it from leaves: disjoint ranges with
    /// their items, and keys outside them, over keys 'a'..'a'+20.
    fn run_strategy() -> impl Strategy<Value = RunSpec> {
        (
            proptest::collection::vec(
                (
                    0u8..20,
                    proptest::option::of(1u8..8),
                    proptest::collection::vec(0u8..8, 0..4),
                ),
                0..3,
            ),
            proptest::collection::vec((0u8..20, any::<bool>()), 0..8),
            1u64..1000,
        )
    }

    proptest! {
        /// Base, then runs applied one by one to a map, against the overlay
        /// merged with the base as a stream.
        #[test]
        fn an_overlay_merged_with_its_base_is_the_runs_applied_in_order(
            base in proptest::collection::btree_map(0u8..20, 1u64..100, 0..20),
            runs in proptest::collection::vec(run_strategy(), 0..5),
        ) {
            let mut model: Model = base.iter().map(|(k, v)| (key(*k), *v)).collect();
            let mut overlay = Overlay::default();
            for (ranges, keys, v) in runs {
                // Disjoint ranges: each starts at `lo`, spans `len` keys
                // (None: to the end), skipping what an earlier one took.
                let mut taken = std::collections::BTreeSet::new();
                let mut run = Run::default();
                for (lo, len, offs) in ranges {
                    let hi = len.map(|l| lo.saturating_add(l).min(21));
                    let span: Vec<u8> = (lo..hi.unwrap_or(40)).collect();
                    if span.iter().any(|k| taken.contains(k)) {
                        continue;
                    }
                    taken.extend(span.iter().copied());
                    let lo_key = if lo == 0 && len.is_none() { Vec::new() } else { key(lo) };
                    let hi_key = hi.map(key);
                    model.retain(|k, _| !(k[..] >= lo_key[..] && hi_key.as_ref().is_none_or(|h| k < h)));
                    run.ranges.push((lo_key, hi_key));
                    for o in offs {
                        let k = lo + o;
                        if span.contains(&k) && k < 20 {
                            model.insert(key(k), v);
                            run.keys.push((key(k), Some(item(v))));
                        }
                    }
                }
                for (k, put) in keys {
                    if taken.contains(&k) {
                        continue;
                    }
                    if put {
                        model.insert(key(k), v + 1);
                        run.keys.push((key(k), Some(item(v + 1))));
                    } else {
                        model.remove(&key(k));
                        run.keys.push((key(k), None));
                    }
                }
                overlay.apply(run);
            }
            let mut got = Model::new();
            let mut emit = |it: &CkptItem<'_>| -> Result<(), ()> {
                assert!(got.keys().next_back().is_none_or(|l| l[..] < *it.key), "ascending");
                got.insert(it.key.to_vec(), it.version);
                Ok(())
            };
            let mut m = overlay.merge();
            for (k, v) in &base {
                let k = key(*k);
                let value = v.to_le_bytes();
                m.base(&CkptItem { version: *v, expiry: 0, client_flags: 0, key: &k, value: &value }, &mut emit).unwrap();
            }
            m.finish(&mut emit).unwrap();
            prop_assert_eq!(got, model);
        }
    }
}
