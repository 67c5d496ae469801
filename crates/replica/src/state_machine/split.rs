//! Splitting the range a group serves: the split entry as every replica
//! applies it, and the directory a new group starts from.

use std::collections::BTreeSet;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

use combkv::Store;
use combkv::op::Outcome;
use openraft::{BasicNode, SnapshotMeta, StoredMembership};

use super::{SmState, StateMachine, write_snapshot};
use crate::ranges::{Bounds, MapChange, SplitRange};
use crate::snapshot::Header;
use crate::types::{LogId, NodeId};

/// The right part of a split, as every replica of the splitting range
/// applied it: what a new group serving it starts from.
#[derive(Debug)]
pub struct SplitChild {
    /// The new range's bounds (its id is its group's).
    pub bounds: Bounds,
    /// Its keys as they stood at the split, versions, expiries and flags
    /// kept (CAS tokens survive the split), its clock the splitting store's.
    pub store: Store,
    /// The splitting store's read version after its last write before the
    /// split (at most `store`'s clock): the keys stood as they are at
    /// every version from it to the split, so the new range can be read
    /// at a timestamp from it on ([`combkv::Store::hold_history_since`]),
    /// not only from its clock, which reads elsewhere may have raised
    /// just before the split.
    pub since: combkv::Version,
    /// The clock of the entry that split it.
    pub now_ms: u64,
    /// The splitting group's membership: the new group's voters and
    /// learners are the same.
    pub membership: StoredMembership<NodeId, BasicNode>,
    /// Every id that was a voter of the splitting group.
    pub ever_voters: BTreeSet<NodeId>,
    /// The snapshot pins this replica of the splitting range held: the
    /// new range's replica here takes them (`Past::inherit`), so that a
    /// snapshot taken before the split still reads the keys split off.
    pub(crate) pins: Vec<crate::past::Pin>,
}

/// A function handed each split's new range, on every replica, while the
/// split entry applies (the host starts the new group from it).
#[derive(Clone)]
pub struct SplitHook(pub Arc<dyn Fn(SplitChild) + Send + Sync>);

impl std::fmt::Debug for SplitHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SplitHook")
    }
}

impl StateMachine {
    /// Applies a split of this group's range (see [`SplitRange`]): the keys
    /// from `at` on, as they stand, go to a new store handed to the split
    /// hook, and are deleted here, on every replica alike; the bounds keep
    /// the left part. In the group that keeps the range map, the map
    /// records the split in the same entry. Refused, changing nothing, if
    /// decided by another epoch or at a key not strictly inside.
    pub(super) fn split(
        &self,
        split: &SplitRange,
        state: &mut SmState,
        now_ms: u64,
    ) -> Result<Outcome, combkv::Error> {
        let mut bounds = state
            .bounds
            .clone()
            .unwrap_or_else(|| Bounds::whole(self.group));
        let right = bounds
            .split(split)
            .map_err(|e| combkv::Error::InvalidConfig(e.to_string()))?;
        // The group that keeps the map splits its own range in the map in
        // the same entry, and only if the map takes it (the new id unused,
        // the range's version as the map has it): two splits proposed from
        // one view of the map must not both make a range of one id.
        let mut new_map = None;
        if self.keeps_map {
            let map = state.ranges.as_ref().ok_or_else(|| {
                combkv::Error::InvalidConfig("the range map is not made yet".into())
            })?;
            let desc = map.get(self.group).ok_or_else(|| {
                combkv::Error::InvalidConfig(format!("the map has no range {}", self.group))
            })?;
            if desc.epoch.version + 1 != bounds.epoch.version {
                return Err(combkv::Error::InvalidConfig(format!(
                    "range {} is at version {} in the map and {} here",
                    self.group,
                    desc.epoch.version,
                    bounds.epoch.version - 1
                )));
            }
            let change = MapChange::Split {
                range: self.group,
                epoch: desc.epoch,
                at: split.at.clone(),
                new_id: split.new_id,
            };
            // Applied to a copy, kept only once the split has been made.
            let mut map = map.clone();
            map.apply(&change)
                .map_err(|e| combkv::Error::InvalidConfig(e.to_string()))?;
            new_map = Some(map);
        }
        let now = now_ms.max(state.now_ms);
        state.now_ms = now;
        let store = self.cell.get();
        let pin = store.pin();
        let span = combkv::Range::new(
            std::ops::Bound::Included(right.start.clone()),
            right
                .end
                .clone()
                .map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded),
        );
        let mut items = Vec::new();
        store.visit_range_at(&pin, &span, |it| {
            items.push(it.to_item());
            true
        });
        let clock = store.read_version();
        drop(pin);
        let since = combkv::Version(state.last_write).min(clock);
        let child = Store::restore(self.config.clone(), clock, items.iter().cloned())?;
        for it in &items {
            let op = combkv::op::Op::Delete {
                key: &it.key,
                cond: combkv::op::Cond::Any,
                return_old: false,
            };
            if let Err(e @ combkv::Error::ReadOnly(_)) = store.apply_at(&op, now) {
                return Err(e);
            }
        }
        state.last_write = store.read_version().get();
        tracing::info!(
            "split {bounds} off {right}: {} keys moved to the new range",
            items.len()
        );
        state.bounds = Some(bounds);
        if new_map.is_some() {
            state.ranges = new_map;
        }
        if let Some(hook) = &self.on_split {
            (hook.0)(SplitChild {
                bounds: right,
                store: child,
                since,
                now_ms: now,
                membership: state.membership.clone(),
                ever_voters: state.ever_voters.clone(),
                pins: self.past.to_inherit(),
            });
        }
        Ok(Outcome::Clear)
    }
}

/// Where a new group's state starts: the first log id of every group
/// made by a split, the one its seed snapshot stands at. Every replica of
/// the new group starts from the same one, so none needs the entries of
/// the group it came from, and a replica that has nothing is sent a
/// snapshot (the log before it is purged everywhere).
fn seed_log_id() -> LogId {
    openraft::LogId::new(openraft::CommittedLeaderId::new(0, 0), 0)
}

/// Writes, under `dir` (a group's directory), the state a group made by a
/// split starts from: a snapshot of `child`'s store at the seed log id,
/// with the splitting group's membership, as if installed. Done once:
/// written beside `dir` and renamed into place, so a crash leaves either
/// nothing (the split is applied again when its entry is replayed, or the
/// new group's leader sends a snapshot) or the whole seed. Ok(false): the
/// group was seeded before (it may have gone on since).
pub fn seed_split_group(dir: &Path, child: &SplitChild) -> io::Result<bool> {
    if dir.exists() {
        return Ok(false);
    }
    let parent = dir.parent().ok_or_else(|| io::Error::other("no parent"))?;
    std::fs::create_dir_all(parent)?;
    let tmp = parent.join(format!(
        ".{}.seeding",
        dir.file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    ));
    let _ = std::fs::remove_dir_all(&tmp);
    let snapshots = tmp.join("snapshots");
    std::fs::create_dir_all(&snapshots)?;
    let at = seed_log_id();
    let pin = child.store.pin();
    let header = Header {
        meta: SnapshotMeta {
            last_log_id: Some(at),
            last_membership: StoredMembership::new(Some(at), child.membership.membership().clone()),
            snapshot_id: format!("{:020}-0-{}-seed", 0, pin.version().get()),
        },
        clock: child.store.read_version().get(),
        now_ms: child.now_ms,
        ever_voters: child.ever_voters.iter().copied().collect(),
        settings: Vec::new(),
        ranges: None,
        bounds: Some(child.bounds.clone()),
    };
    write_snapshot(&snapshots, &header, &child.store, pin)?;
    File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, dir)?;
    File::open(parent)?.sync_all()?;
    Ok(true)
}
