//! The two steps of a merge as every replica applies them
//! (`ranges::merge`): the right range retired, its keys absorbed by the
//! range on its left.

use std::sync::Arc;

use combkv::op::Outcome;
use combkv::{Item, Store, Version};

use super::{SmState, StateMachine};
use crate::ranges::{AbsorbRange, Bounds, RetireRange};

fn refused(why: String) -> combkv::Error {
    combkv::Error::InvalidConfig(why)
}

impl StateMachine {
    /// Retires the range this group serves if its bounds are those
    /// `retire` names: from here on every op of it is refused (routed
    /// again) and it serves no read; its keys stay as they are, for the
    /// range on its left to take. Retired already: nothing changes. The
    /// group that keeps the map (range 0, always the first) never retires.
    pub(super) fn retire(
        &self,
        retire: &RetireRange,
        state: &mut SmState,
    ) -> Result<Outcome, combkv::Error> {
        let Some(bounds) = state.bounds.as_mut().filter(|_| !self.keeps_map) else {
            return Err(refused("the first range is never merged away".into()));
        };
        if bounds.start != retire.start || bounds.end != retire.end {
            return Err(refused(format!(
                "{bounds}: not the bounds the merge retires (split meanwhile)"
            )));
        }
        if !bounds.retired {
            bounds.retired = true;
            bounds.epoch.version += 1;
            tracing::info!("{bounds}");
        }
        Ok(Outcome::Clear)
    }

    /// Takes a retired range's keys (`absorb`) into this group's range, if
    /// its bounds are those the proposer saw and end where the retired
    /// range starts: the store is made again from its own keys and those,
    /// versions, expiries and flags kept, its clock above both stores'; the
    /// bounds reach the retired range's end, at the epoch version the map
    /// gave the merged range. The new store keeps no past: a read at a
    /// timestamp before this entry is refused and taken again later. With
    /// no range to take (its end the bounds' own), only the version moves.
    pub(super) fn absorb(
        &self,
        absorb: &AbsorbRange,
        state: &mut SmState,
    ) -> Result<Outcome, combkv::Error> {
        let mut bounds = state
            .bounds
            .clone()
            .unwrap_or_else(|| Bounds::whole(self.group));
        if bounds != absorb.expect || bounds.retired {
            return Err(refused(format!(
                "{bounds}: not the bounds the merge was decided by ({})",
                absorb.expect
            )));
        }
        if absorb.version <= bounds.epoch.version {
            return Err(refused(format!(
                "{bounds}: the merge's version {} is not newer",
                absorb.version
            )));
        }
        // No keys to take: the map merged back a split this range had not
        // applied, and gave it a newer version only.
        if absorb.end == bounds.end {
            if !absorb.items.is_empty() {
                return Err(refused(format!("{bounds}: keys to take, and no range")));
            }
            bounds.epoch.version = absorb.version;
            tracing::info!("{bounds}: the map's version, after a split merged back");
            state.bounds = Some(bounds);
            return Ok(Outcome::Clear);
        }
        let Some(start) = bounds.end.clone() else {
            return Err(refused(format!("{bounds} ends the keyspace")));
        };
        let within =
            |k: &[u8], end: Option<&[u8]>| k >= start.as_slice() && end.is_none_or(|e| k < e);
        if absorb.end.as_deref().is_some_and(|e| e <= start.as_slice())
            || absorb
                .items
                .iter()
                .any(|it| !within(&it.key, absorb.end.as_deref()))
            || absorb.items.windows(2).any(|w| w[0].key >= w[1].key)
        {
            return Err(refused(
                "the keys to absorb are not in order inside the retired range".into(),
            ));
        }
        let store = self.cell.get();
        let pin = store.pin();
        let mut items = Vec::with_capacity(store.len() as usize + absorb.items.len());
        store.visit_all_at(&pin, |it| {
            // Only its own keys: a key the bounds no longer hold (moved by
            // a split) is gone from the store already.
            if bounds.contains(it.key) {
                items.push(it.to_item());
            }
            true
        });
        let clock = store.read_version().max(Version(absorb.clock));
        drop(pin);
        let taken = absorb.items.len();
        items.extend(absorb.items.iter().map(|it| Item {
            key: it.key.clone().into(),
            value: it.value.clone().into(),
            version: Version(it.version),
            expires_at_ms: it.expires_at_ms,
            flags: it.flags,
        }));
        let merged = Store::restore(self.config.clone(), clock, items)?;
        // One swap, as a snapshot's install: a reader sees the range as it
        // was or merged, never a mix.
        self.cell.set(Arc::new(merged));
        state.last_write = clock.get();
        bounds.end = absorb.end.clone();
        bounds.epoch.version = absorb.version;
        tracing::info!(
            "{bounds}: took {taken} keys of range {}, merged into it",
            absorb.right
        );
        state.bounds = Some(bounds);
        Ok(Outcome::Clear)
    }
}
