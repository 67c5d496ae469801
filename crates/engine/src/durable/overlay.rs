//! Delta runs composed in memory and merged with a base checkpoint as it
//! streams past: what recovery bulk loads and what background compaction
//! writes as the next base. Runs are small (they hold what changed); the
//! base is never held whole.

use std::cmp::Ordering;
use std::ops::Range;

use super::delta::Entry;
use super::record::CkptItem;

/// A key entry of a run: the key, and the item (None: absent), as byte
/// ranges of the run's data.
#[derive(Debug, Clone)]
struct KeyEntry {
    key: Range<usize>,
    item: Option<(u64, u64, u32, Range<usize>)>,
}

/// One delta run, read whole and verified before it joins an overlay: its
/// keys and ranges, each in ascending order, over one buffer of bytes.
#[derive(Debug, Default, Clone)]
pub(crate) struct Run {
    data: Vec<u8>,
    keys: Vec<KeyEntry>,
    /// `[lo, hi)` (hi None: unbounded).
    ranges: Vec<(Range<usize>, Option<Range<usize>>)>,
}

impl Run {
    fn bytes(&mut self, b: &[u8]) -> Range<usize> {
        let at = self.data.len();
        self.data.extend_from_slice(b);
        at..self.data.len()
    }

    /// Adds the next entry of a run (in the run's order: keys ascend, and
    /// so do ranges).
    pub(crate) fn push(&mut self, e: &Entry<'_>) {
        match *e {
            Entry::Put(ref it) => {
                let key = self.bytes(it.key);
                let value = self.bytes(it.value);
                self.keys.push(KeyEntry {
                    key,
                    item: Some((it.version, it.expiry, it.client_flags, value)),
                });
            }
            Entry::Del(k) => {
                let key = self.bytes(k);
                self.keys.push(KeyEntry { key, item: None });
            }
            Entry::Range { lo, hi } => {
                let lo = self.bytes(lo);
                let hi = hi.map(|h| self.bytes(h));
                self.ranges.push((lo, hi));
            }
        }
    }

    fn key(&self, i: usize) -> Option<&[u8]> {
        self.keys.get(i).map(|e| &self.data[e.key.clone()])
    }

    fn item(&self, i: usize) -> Option<CkptItem<'_>> {
        let e = &self.keys[i];
        e.item
            .as_ref()
            .map(|(version, expiry, flags, value)| CkptItem {
                version: *version,
                expiry: *expiry,
                client_flags: *flags,
                key: &self.data[e.key.clone()],
                value: &self.data[value.clone()],
            })
    }
}

/// The runs of a chain, oldest first: the newest entry of a key wins, and
/// a run's ranges hide every older entry and base item inside them.
#[derive(Debug, Default)]
pub(crate) struct Overlay {
    runs: Vec<Run>,
}

impl Overlay {
    /// Applies `run` on top of the runs before it.
    pub(crate) fn apply(&mut self, run: Run) {
        self.runs.push(run);
    }

    /// A merge of this overlay with a base streamed in key order.
    pub(crate) fn merge(&self) -> Merge<'_> {
        Merge {
            runs: &self.runs,
            key_at: vec![0; self.runs.len()],
            range_at: vec![0; self.runs.len()],
        }
    }
}

/// The state a base plus an overlay make, produced as the base streams
/// past (`base`, then `finish`): a merge of the sorted runs, each with a
/// cursor over its keys and one over its ranges; keys are visited in
/// ascending order, so both cursors only move forward.
pub(crate) struct Merge<'o> {
    runs: &'o [Run],
    key_at: Vec<usize>,
    range_at: Vec<usize>,
}

impl<'o> Merge<'o> {
    /// Whether a range of run `r` holds `key` (keys asked ascend).
    fn covered(&mut self, r: usize, key: &[u8]) -> bool {
        let run = &self.runs[r];
        let at = &mut self.range_at[r];
        while let Some((_, Some(hi))) = run.ranges.get(*at)
            && run.data[hi.clone()] <= *key
        {
            *at += 1;
        }
        run.ranges
            .get(*at)
            .is_some_and(|(lo, _)| run.data[lo.clone()] <= *key)
    }

    /// The smallest key at the runs' key cursors.
    fn next_key(&self) -> Option<&'o [u8]> {
        let runs = self.runs;
        (0..runs.len())
            .filter_map(|r| runs[r].key(self.key_at[r]))
            .min()
    }

    /// Settles `key` (every run cursor at it moves past it): the item
    /// visible there, if a run has it. Some(None): a run has the key
    /// (the base's item is replaced) and it is absent.
    fn settle(&mut self, key: &[u8]) -> Option<Option<(usize, usize)>> {
        let mut newest = None;
        for r in 0..self.runs.len() {
            if self.runs[r].key(self.key_at[r]) == Some(key) {
                newest = Some((r, self.key_at[r]));
                self.key_at[r] += 1;
            }
        }
        let (r, i) = newest?;
        // A newer run's range without the key hides it.
        let hidden = (r + 1..self.runs.len()).any(|j| self.covered(j, key));
        Some((!hidden && self.runs[r].keys[i].item.is_some()).then_some((r, i)))
    }

    /// Takes the next base item (keys ascending): hands `emit` every
    /// overlay item below it, then the item itself unless the overlay
    /// replaces or hides it.
    pub(crate) fn base<E>(
        &mut self,
        it: &CkptItem<'_>,
        emit: &mut impl FnMut(&CkptItem<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        while let Some(k) = self.next_key() {
            match k.cmp(it.key) {
                Ordering::Less => {
                    if let Some(Some((r, i))) = self.settle(k) {
                        emit(&self.runs[r].item(i).expect("a put"))?;
                    }
                }
                Ordering::Equal => {
                    if let Some(Some((r, i))) = self.settle(k) {
                        emit(&self.runs[r].item(i).expect("a put"))?;
                    }
                    return Ok(());
                }
                Ordering::Greater => break,
            }
        }
        if (0..self.runs.len()).any(|r| self.covered(r, it.key)) {
            return Ok(());
        }
        emit(it)
    }

    /// After the last base item: the overlay items above it.
    pub(crate) fn finish<E>(
        mut self,
        emit: &mut impl FnMut(&CkptItem<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        while let Some(k) = self.next_key() {
            if let Some(Some((r, i))) = self.settle(k) {
                emit(&self.runs[r].item(i).expect("a put"))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use std::collections::BTreeMap;

    type Model = BTreeMap<Vec<u8>, u64>;

    fn key(n: u8) -> Vec<u8> {
        vec![b'a' + n]
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
                let mut run_ranges: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
                let mut run_keys: BTreeMap<Vec<u8>, Option<u64>> = BTreeMap::new();
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
                    run_ranges.push((lo_key, hi_key));
                    for o in offs {
                        let k = lo + o;
                        if span.contains(&k) && k < 20 {
                            model.insert(key(k), v);
                            run_keys.insert(key(k), Some(v));
                        }
                    }
                }
                for (k, put) in keys {
                    if taken.contains(&k) {
                        continue;
                    }
                    if put {
                        model.insert(key(k), v + 1);
                        run_keys.insert(key(k), Some(v + 1));
                    } else {
                        model.remove(&key(k));
                        run_keys.insert(key(k), None);
                    }
                }
                run_ranges.sort();
                let mut run = Run::default();
                for (lo, hi) in &run_ranges {
                    run.push(&Entry::Range { lo, hi: hi.as_deref() });
                }
                for (k, v) in &run_keys {
                    let value = v.unwrap_or(0).to_le_bytes();
                    run.push(&match v {
                        Some(v) => Entry::Put(CkptItem { version: *v, expiry: 0, client_flags: 0, key: k, value: &value }),
                        None => Entry::Del(k),
                    });
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
