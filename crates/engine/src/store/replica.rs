//! What a replicated store needs beyond the single-node API: a consistent
//! copy of everything at a held version, and a store built from such a
//! copy. The engine knows nothing of replication; these are plain reads
//! and a bulk load.

use std::ops::Bound;

use super::{Pin, Store};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::tree::load::BulkLoader;
use crate::types::{Item, ItemView, Now, Range, Version};

impl Store {
    /// Visits every item at `pin`'s version in key order, expired ones
    /// included (expiry is judged by whoever reads the copy), until `f`
    /// returns false. Returns how many it visited.
    pub fn visit_all_at(&self, pin: &Pin, f: impl FnMut(ItemView<'_>) -> bool) -> usize {
        let all = Range::new(Bound::Unbounded, Bound::Unbounded);
        self.visit_range_at(pin, &all, f)
    }

    /// Visits the items of `range` (its bounds only: no limit, ascending)
    /// at `pin`'s version, expired ones included, as [`Store::visit_all_at`]
    /// does for all: the copy of one half of a store that a split of a
    /// range into two stores loads into the new one.
    pub fn visit_range_at(
        &self,
        pin: &Pin,
        range: &Range,
        mut f: impl FnMut(ItemView<'_>) -> bool,
    ) -> usize {
        let guard = self.tree.pin();
        // A clock at the epoch's first millisecond: nothing has expired.
        let epoch = Now::at(1);
        let bounds = Range::new(range.start.clone(), range.end.clone());
        let n = self
            .tree
            .visit_range(&bounds, pin.version().0, &epoch, &mut |it| f(it.view()));
        drop(guard);
        n
    }

    /// A store holding `items` (in strictly ascending key order, each with
    /// its version, expiry and flags), its version clock at `clock`: a
    /// replica installing a snapshot builds one and swaps it in whole.
    /// Refuses items out of order, over the limits or with a version above
    /// `clock`.
    pub fn restore(
        config: Config,
        clock: Version,
        items: impl IntoIterator<Item = Item>,
    ) -> Result<Store> {
        let geometry = config.validate()?;
        let mut loader = BulkLoader::new(&geometry);
        for (n, it) in items.into_iter().enumerate() {
            if it.value.len() > config.max_value_len {
                return Err(Error::ValueTooLarge {
                    len: it.value.len(),
                    max: config.max_value_len,
                });
            }
            if it.version > clock {
                return Err(Error::Corrupt(format!(
                    "item {n} has version {} above the clock {clock}",
                    it.version
                )));
            }
            loader
                .push(
                    &it.key,
                    &it.value,
                    it.version.0,
                    it.expires_at_ms.unwrap_or(0),
                    it.flags,
                )
                .map_err(|e| Error::Corrupt(format!("item {n}: {e}")))?;
        }
        let (tree, _) = loader.finish();
        tree.reset_clock(clock.0);
        Ok(Store::with_tree(config, geometry, tree))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Expiry;

    #[test]
    fn a_restored_store_equals_the_copy_and_goes_on_at_its_clock() {
        let a = Store::new(Config::default()).unwrap();
        for i in 0..3000u32 {
            let k = format!("k{i:05}");
            let expiry = if i % 7 == 0 {
                Expiry::AtMs(5)
            } else {
                Expiry::Never
            };
            a.put_with(k.as_bytes(), &i.to_le_bytes().repeat(40), expiry)
                .unwrap();
        }
        let pin = a.pin();
        a.put(b"after", b"the pin").unwrap();
        let mut items = Vec::new();
        let n = a.visit_all_at(&pin, |it| {
            items.push(it.to_item());
            true
        });
        assert_eq!(n, 3000, "expired items included, the later write not");
        let b = Store::restore(Config::default(), pin.version(), items.clone()).unwrap();
        assert_eq!(b.read_version(), pin.version());
        let live: Vec<_> = items
            .iter()
            .filter(|it| it.expires_at_ms.is_none())
            .collect();
        let got = b.range(&Range::all()).unwrap();
        assert_eq!(got.len(), live.len());
        for (g, w) in got.iter().zip(live) {
            assert_eq!(g, w);
        }
        // The next write takes the version after the clock, as on `a`.
        let va = a.put(b"next", b"x").unwrap();
        let vb = b.put(b"after", b"the pin").unwrap();
        assert_eq!(vb.get(), pin.version().get() + 1);
        assert!(va > vb);
        let mut bad = items.clone();
        bad.swap(0, 1);
        assert!(Store::restore(Config::default(), pin.version(), bad).is_err());
    }

    #[test]
    fn a_range_at_a_pin_is_its_bounds_at_that_version() {
        let a = Store::new(Config::default()).unwrap();
        for i in 0..2000u32 {
            a.put(format!("k{i:05}").as_bytes(), b"old").unwrap();
        }
        let pin = a.pin();
        a.put(b"k01000", b"new").unwrap();
        a.delete(b"k01001").unwrap();
        a.put(b"k01000x", b"inserted after the pin").unwrap();
        let half = Range::new(
            Bound::Included(b"k01000".to_vec()),
            Bound::Excluded(b"k01500".to_vec()),
        );
        let mut seen = Vec::new();
        let n = a.visit_range_at(&pin, &half, |it| {
            assert_eq!(it.value, b"old");
            seen.push(it.key.to_vec());
            true
        });
        assert_eq!(n, 500);
        let want: Vec<Vec<u8>> = (1000..1500u32)
            .map(|i| format!("k{i:05}").into_bytes())
            .collect();
        assert_eq!(seen, want);
        // The visitor stops it.
        let mut k = 0;
        a.visit_range_at(&pin, &half, |_| {
            k += 1;
            k < 10
        });
        assert_eq!(k, 10);
    }
}
