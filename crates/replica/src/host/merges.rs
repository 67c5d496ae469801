//! Merges of ranges (`ranges::merge`): recorded in the map first
//! ([`Host::merge`]), then carried out by the left range's leader
//! (`drive_merges`: the right range retired, its keys absorbed), and
//! decided, for neighbours far below the split size, by that leader too
//! (`merge_small`).

use std::sync::atomic::Ordering;

use crate::error::ClusterError;
use crate::ranges::{AbsorbRange, MapChange, RangeId};
use crate::replica::Replica;
use crate::types::GroupId;

use super::Host;

impl Host {
    /// Merges range `left` with the range after it: the map records the
    /// merge (refused, changing nothing, unless both are on the same
    /// nodes, or if either changed since the map was read), and the left
    /// range's leader carries it out (`drive_merges`; at once if it is
    /// this node). Returns the id of the range merged away.
    pub async fn merge(&self, left: RangeId) -> Result<RangeId, ClusterError> {
        let (meta, map) = self.committed_map().await?;
        let l = map
            .get(left)
            .ok_or_else(|| ClusterError::Refused(format!("no range {left}")))?;
        let end = l.end.clone().ok_or_else(|| {
            ClusterError::Refused(format!(
                "range {left} ends the keyspace: nothing follows it"
            ))
        })?;
        let r = map.route(&end);
        meta.change_ranges(&MapChange::Merge {
            left,
            left_epoch: l.epoch,
            right: r.id,
            right_epoch: r.epoch,
        })
        .await?;
        self.drive_merges().await;
        Ok(r.id)
    }

    /// [`Host::merge`] of the range holding `key`.
    pub async fn merge_at(&self, key: &[u8]) -> Result<RangeId, ClusterError> {
        let (_, map) = self.committed_map().await?;
        self.merge(map.route(key).id).await
    }

    /// Carries out, for each range this node leads, a merge the map
    /// records and the range's group has not absorbed yet: the range the
    /// map gives more keys than its group holds takes them from the group
    /// that starts where it ends (a replica on this node: a merge joins
    /// ranges on the same nodes, and the left range's replicas do not move
    /// until it is done). That group is retired first, then its keys go
    /// through this range's log. A chain of merges resolves one group at a
    /// time. A range whose map entry only moved its epoch on (a split
    /// merged back before the range applied it) takes that epoch. Every
    /// 100 ms on every node.
    pub(super) async fn drive_merges(&self) {
        if self.groups().iter().all(|&g| g == 0) {
            return;
        }
        let Some(map) = self.group(0).and_then(|g| g.range_map()) else {
            return;
        };
        for g in self.groups() {
            let Some(r) = self.group(g).filter(|r| r.is_leader() && r.is_voter()) else {
                continue;
            };
            let (Some(desc), bounds) = (map.get(g), r.bounds()) else {
                continue;
            };
            // Only a map newer than the group's bounds asks for a merge:
            // this node's copy may lag the group (not show a split the
            // group has applied).
            if bounds.retired
                || desc.start != bounds.start
                || desc.epoch.version <= bounds.epoch.version
            {
                continue;
            }
            let Some(ends) = bounds.end.clone() else {
                continue;
            };
            let grows = desc.end.as_ref().is_none_or(|e| *e > ends);
            if !grows {
                if desc.end == bounds.end {
                    let absorb = AbsorbRange {
                        expect: bounds.clone(),
                        right: g,
                        end: bounds.end.clone(),
                        version: desc.epoch.version,
                        clock: 0,
                        items: Vec::new(),
                    };
                    match r.absorb(&absorb).await {
                        Ok(()) => tracing::info!("range {g} takes the map's epoch {}", desc.epoch),
                        Err(e) => tracing::debug!("range {g}: taking the map's epoch waits: {e}"),
                    }
                }
                continue;
            }
            let Some(right) = self
                .group_starting_at(&ends)
                .filter(|h| map.get(h.group()).is_none())
            else {
                tracing::debug!("range {g}: the range it merges with has no replica here yet");
                continue;
            };
            let rb = right.bounds();
            if !rb.retired {
                // Its own split the map recorded first (its new range is
                // not merged): the split driver carries it out.
                let past_end = match (&rb.end, &desc.end) {
                    (_, None) => false,
                    (None, Some(_)) => true,
                    (Some(a), Some(b)) => a > b,
                };
                if past_end {
                    continue;
                }
                // Retiring is for good: only once the committed map (not
                // this node's copy) has merged the range away.
                match self.committed_map().await {
                    Ok((_, m)) if m.get(right.group()).is_none() => {}
                    _ => continue,
                }
                if let Err(e) = right.retire().await {
                    tracing::debug!("range {g}: retiring range {}: {e}", right.group());
                    continue;
                }
            }
            // Applied here once the retirement's answer came (or later).
            let Some((clock, items)) = right.retired_keys() else {
                continue;
            };
            let absorb = AbsorbRange {
                expect: bounds,
                right: right.group(),
                end: rb.end,
                version: desc.epoch.version,
                clock,
                items,
            };
            let keys = absorb.items.len();
            match r.absorb(&absorb).await {
                Ok(()) => {
                    self.0.counts.merges.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(
                        "range {g} took range {}'s {keys} keys: merged",
                        absorb.right
                    );
                }
                Err(e) => tracing::debug!("range {g}: absorbing range {}: {e}", absorb.right),
            }
        }
    }

    /// The newest group on this node (the highest id) whose range starts
    /// at `start`: a retired one stays until it is deleted, beside a newer
    /// one a later split made there.
    fn group_starting_at(&self, start: &[u8]) -> Option<Replica> {
        self.groups()
            .into_iter()
            .rev()
            .filter(|&g| g != 0)
            .filter_map(|g| self.group(g))
            .find(|r| r.bounds().start == start)
    }

    /// Deletes this node's replicas of `groups`, ranges this node's map
    /// does not hold, that the committed map has merged away (ids are
    /// never reused, and every group is in the map before it is made), once
    /// this node's replica of the range that took each one's keys holds
    /// them: its bounds reach over the group's start, at the epoch the
    /// committed map gives it or later. The keys live on there, and in that
    /// range's log. Before, each stays: the merge is under way, or this
    /// node's replicas have not applied it (after a restart, a group's
    /// replay may lag the others'). Retired here or not: a replica that
    /// missed its retirement, the others deleted, never learns of it.
    pub(super) async fn drop_merged_away(&self, groups: &[GroupId]) {
        if groups.is_empty() {
            return;
        }
        let Ok((_, map)) = self.committed_map().await else {
            return;
        };
        for &g in groups.iter().filter(|&&g| map.get(g).is_none()) {
            let Some(r) = self.group(g) else { continue };
            let start = r.bounds().start;
            // A group at the start of the keyspace is no range merged
            // away (the first range is never a merge's right half): one a
            // test or tool started outside the map.
            if start.is_empty() {
                continue;
            }
            let taker = map.route(&start);
            let absorbed = self.group(taker.id).is_some_and(|t| {
                let b = t.bounds();
                b.contains(&start) && b.epoch.version >= taker.epoch.version
            });
            if !absorbed {
                continue;
            }
            let Some(replica) = self.remove_group(g) else {
                continue;
            };
            replica.shutdown().await;
            match self.delete_group_files(g) {
                Ok(()) => {
                    self.0.counts.deleted.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(
                        "range {g} merged into range {}: its replica here is deleted",
                        taker.id
                    );
                }
                Err(e) => tracing::warn!("range {g} merged away; deleting its files: {e}"),
            }
        }
    }

    /// Merges each range this node leads with the range after it when
    /// both are far below the split size: their keys and values together
    /// below the `merge_bytes` setting, fewer requests a second together
    /// than half the split load (where splits by load are on), neither
    /// pinned by a snapshot (a merge ends what a snapshot can read of
    /// them), both on the same nodes, and both settled (bounds as the map
    /// gives them, here). One merge a turn; range 0's right neighbour only
    /// where it is on every node. Once a second, after the splits.
    pub(super) async fn merge_small(&self) {
        let (limit, split_load) = match self.0.template.lock().as_ref() {
            Some(t) if t.merge_bytes > 0 => (t.merge_bytes, t.split_load),
            _ => return,
        };
        let map = self.range_map();
        let settled = |r: &Replica, d: &crate::ranges::RangeDesc| {
            let b = r.bounds();
            !b.retired
                && r.is_voter()
                && b.start == d.start
                && b.end == d.end
                && b.epoch.version == d.epoch.version
                && r.snapshot_pins() == 0
        };
        for left in map.ranges() {
            let Some(l) = self.group(left.id).filter(|r| r.is_leader()) else {
                continue;
            };
            let Some(end) = &left.end else { continue };
            let right = map.route(end);
            let same_nodes = sorted(&left.voters) == sorted(&right.voters)
                && left.learners.is_empty()
                && right.learners.is_empty();
            let Some(r) = self.group(right.id) else {
                continue;
            };
            if !same_nodes || !settled(&l, left) || !settled(&r, right) {
                continue;
            }
            if split_load > 0 && l.load().rate() + r.load().rate() >= split_load / 2 {
                continue;
            }
            let Some(bytes) =
                bytes_below(&l, limit).and_then(|a| bytes_below(&r, limit - a).map(|b| a + b))
            else {
                continue;
            };
            match self.merge(left.id).await {
                Ok(gone) => tracing::info!(
                    "ranges {} and {gone} held {bytes} bytes of keys and values together \
                     (fewer than {limit}): merged",
                    left.id
                ),
                Err(e) => tracing::debug!("range {}: a merge waits: {e}", left.id),
            }
            return;
        }
    }
}

/// The bytes of keys and values `r`'s store holds, if fewer than `limit`
/// (counted by a scan that stops at the limit).
fn bytes_below(r: &Replica, limit: u64) -> Option<u64> {
    let store = r.current_store();
    let mut total = 0u64;
    let _ = store.scan(&combkv::Range::all(), |it| {
        total += (it.key.len() + it.value.len()) as u64;
        total < limit
    });
    (total < limit).then_some(total)
}

fn sorted(v: &[crate::types::NodeId]) -> Vec<crate::types::NodeId> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v
}
