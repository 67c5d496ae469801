//! A replica's part in a merge (`ranges::merge`): retiring the range its
//! group serves, handing over the keys of a retired one, and absorbing
//! them into the range on the left. The host's drivers decide when.

use crate::client::one_result;
use crate::error::ClusterError;
use crate::ranges::{AbsorbRange, Bounds, MergedItem, RetireRange};
use crate::replica::Replica;

impl Replica {
    /// Retires the range this group serves if its bounds are `bounds`
    /// (refused, changing nothing, if they changed first): through the
    /// group's log (a follower forwards it). Only once the map no longer
    /// holds the range.
    pub(crate) async fn retire(&self, bounds: &Bounds) -> Result<(), ClusterError> {
        let retire = RetireRange {
            start: bounds.start.clone(),
            end: bounds.end.clone(),
        };
        let now = self.clock_ms();
        let results = self
            .write(now, crate::codec::encode_retire(&retire))
            .await?;
        one_result(results, "retirement")
    }

    /// Once this replica has applied its range's retirement (its keys
    /// change no more): the bounds it was retired with, its store's clock,
    /// and its keys inside them, in key order. None before.
    pub(crate) fn retired_keys(&self) -> Option<(Bounds, u64, Vec<MergedItem>)> {
        let bounds = self.bounds();
        if !bounds.retired {
            return None;
        }
        let store = self.current_store();
        let pin = store.pin();
        let mut items = Vec::with_capacity(store.len() as usize);
        store.visit_all_at(&pin, |it| {
            let inside = it.key >= bounds.start.as_slice()
                && bounds.end.as_deref().is_none_or(|e| it.key < e);
            if inside {
                items.push(MergedItem {
                    key: it.key.to_vec(),
                    value: it.value.to_vec(),
                    version: it.version.get(),
                    expires_at_ms: it.expires_at_ms,
                    flags: it.flags,
                });
            }
            true
        });
        Some((bounds, store.read_version().get(), items))
    }

    /// The bytes of keys and values this replica's store holds, if fewer
    /// than `limit` (a scan that stops there).
    pub(crate) fn bytes_below(&self, limit: u64) -> Option<u64> {
        let store = self.current_store();
        let mut total = 0u64;
        let _ = store.scan(&combkv::Range::all(), |it| {
            total += (it.key.len() + it.value.len()) as u64;
            total < limit
        });
        (total < limit).then_some(total)
    }

    /// Takes a retired range's keys into this group's range, through its
    /// log (see [`AbsorbRange`]).
    pub(crate) async fn absorb(&self, absorb: &AbsorbRange) -> Result<(), ClusterError> {
        let now = self.clock_ms();
        let results = self.write(now, crate::codec::encode_absorb(absorb)).await?;
        one_result(results, "merge")
    }
}
