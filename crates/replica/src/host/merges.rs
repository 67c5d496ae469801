//! Merges of ranges (`ranges::merge`): recorded in the map first
//! ([`Host::merge`]), then carried out by the left range's leader
//! (`drive_merges`: the right range retired, its keys absorbed), and
//! decided, for neighbours far below the split size, by that leader too
//! (`merge_small`).

use std::sync::atomic::Ordering;

use crate::error::ClusterError;
use crate::ranges::{AbsorbRange, MapChange, RangeDesc, RangeId};
use crate::replica::Replica;
use crate::rpc::{Request, Response};
use crate::types::GroupId;

/// The most bytes of keys and values a range merged away may hold: its
/// keys travel in one log entry (a frame is at most 256 MiB).
const MAX_MERGED_BYTES: u64 = 64 << 20;

use super::{Host, Pinned};

impl Host {
    /// Merges range `left` with the range after it: the map records the
    /// merge (refused, changing nothing, unless both are on the same
    /// nodes, if either changed since the map was read, or while a
    /// snapshot pins either: the merged range's new store holds none of
    /// the snapshot's past; [`Pinned::Force`] merges all the same), and
    /// the left range's leader carries it out (`drive_merges`; at once if
    /// it is this node). Returns the id of the range merged away.
    pub async fn merge(&self, left: RangeId) -> Result<RangeId, ClusterError> {
        self.merge_when(left, Pinned::Refuse).await
    }

    /// [`Host::merge`], carried out even while a snapshot pins the ranges
    /// with [`Pinned::Force`].
    pub async fn merge_when(&self, left: RangeId, pinned: Pinned) -> Result<RangeId, ClusterError> {
        let (_, map) = self.committed_map().await?;
        let l = map
            .get(left)
            .ok_or_else(|| ClusterError::Refused(format!("no range {left}")))?;
        let end = l.end.clone().ok_or_else(|| {
            ClusterError::Refused(format!(
                "range {left} ends the keyspace: nothing follows it"
            ))
        })?;
        let r = map.route(&end).clone();
        self.merge_decided(&l.clone(), &r, pinned).await?;
        Ok(r.id)
    }

    /// Records the merge of `left` with `right` as the caller saw them
    /// (refused if either changed since), then carries it out where this
    /// node leads `left`. The keys of the right range go through the left
    /// range's log in one entry: a right range of `MAX_MERGED_BYTES` or
    /// more is refused.
    async fn merge_decided(
        &self,
        left: &RangeDesc,
        right: &RangeDesc,
        pinned: Pinned,
    ) -> Result<(), ClusterError> {
        let meta = self
            .group(0)
            .ok_or_else(|| ClusterError::Refused("this node hosts no group 0".into()))?;
        // The groups' members must be the map's: the left range's leader
        // then holds a replica of the right one (a move the map asked for
        // and the group has not finished stops once the right range leaves
        // the map).
        for d in [left, right] {
            if !self.members_are_the_maps(d).await {
                return Err(ClusterError::Refused(format!(
                    "range {}: its group is not on the nodes the map gives it yet (a move \
                     under way)",
                    d.id
                )));
            }
        }
        if self
            .range_bytes_below(right, MAX_MERGED_BYTES)
            .await
            .is_none()
        {
            return Err(ClusterError::Refused(format!(
                "range {} holds {MAX_MERGED_BYTES} bytes of keys and values or more (or could \
                 not be sized): too large to merge in one step",
                right.id
            )));
        }
        let why = "the merged range would hold none of their past (forced, their reads of it are \
                   refused)";
        for d in [left, right] {
            self.refuse_if_pinned(d, pinned, why, "merge").await?;
        }
        meta.change_ranges(&MapChange::Merge {
            left: left.id,
            left_epoch: left.epoch,
            right: right.id,
            right_epoch: right.epoch,
        })
        .await?;
        self.drive_merges().await;
        Ok(())
    }

    /// [`Host::merge`] of the range holding `key`.
    pub async fn merge_at(&self, key: &[u8], pinned: Pinned) -> Result<RangeId, ClusterError> {
        let (_, map) = self.committed_map().await?;
        self.merge_when(map.route(key).id, pinned).await
    }

    /// Carries out, for each range this node leads, a merge the map
    /// records and the range's group has not absorbed yet: the range the
    /// map gives more keys than its group holds takes them from the group
    /// that starts where it ends (a replica on this node: a merge joins
    /// ranges on the same nodes, and the map moves neither while the merge
    /// is under way). That group is retired first, with the bounds seen
    /// here, then its keys go through this range's log. Once the group's
    /// bounds are the map's, it tells the map the merge is carried out
    /// (`MapChange::Merged`), and the range may split and move again. A
    /// range whose map entry only moved its epoch on (a split merged back
    /// before the range applied it) takes that epoch. Every 100 ms on
    /// every node.
    pub(super) async fn drive_merges(&self) {
        let Some(meta) = self.group(0) else { return };
        // A node of group 0 alone has nothing to do, unless range 0 is
        // carrying out the merge that left it alone (its report is still
        // to make).
        if self.groups().iter().all(|&g| g == 0)
            && !meta.shared_range_map().is_some_and(|m| m.is_merging(0))
        {
            return;
        }
        let Some(map) = meta.range_map() else { return };
        for g in self.groups() {
            let Some(r) = self.group(g).filter(|r| r.is_leader() && r.is_voter()) else {
                continue;
            };
            let (Some(desc), bounds) = (map.get(g), r.bounds()) else {
                continue;
            };
            if map.is_merging(g) {
                tracing::debug!("range {g} merging: map {desc:?}, group {bounds:?}");
            }
            if bounds.retired || desc.start != bounds.start {
                continue;
            }
            if map.is_merging(g)
                && bounds.end == desc.end
                && bounds.epoch.version == desc.epoch.version
            {
                let merged = MapChange::Merged {
                    range: g,
                    version: desc.epoch.version,
                };
                match meta.change_ranges(&merged).await {
                    Ok(()) => tracing::info!("range {g}: its merge is carried out"),
                    Err(e) => tracing::debug!("range {g}: recording its merge waits: {e}"),
                }
                continue;
            }
            // Only a map newer than the group's bounds asks for a merge:
            // this node's copy may lag the group (not show a split the
            // group has applied).
            if desc.epoch.version <= bounds.epoch.version {
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
            // Its own split the map recorded before the merge (its new
            // range is not merged): the split driver carries it out first.
            let past_end = |b: &crate::ranges::Bounds| match (&b.end, &desc.end) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some(a), Some(e)) => a > e,
            };
            let rb = right.bounds();
            if past_end(&rb) {
                tracing::debug!(
                    "range {g}: range {} reaches past the map's end",
                    right.group()
                );
                continue;
            }
            if !rb.retired {
                // Retiring is for good: only once the committed map (not
                // this node's copy) has merged the range away.
                match self.committed_map().await {
                    Ok((_, m)) if m.get(right.group()).is_none() => {}
                    Ok(_) => {
                        tracing::debug!(
                            "range {g}: the committed map still has range {}",
                            right.group()
                        );
                        continue;
                    }
                    Err(e) => {
                        tracing::debug!("range {g}: retiring waits for the committed map: {e}");
                        continue;
                    }
                }
                if let Err(e) = right.retire(&rb).await {
                    tracing::debug!("range {g}: retiring range {}: {e}", right.group());
                    continue;
                }
            }
            // Applied here once the retirement's answer came (or later).
            let Some((retired, clock, items)) = right.retired_keys() else {
                tracing::debug!("range {g}: range {} not retired here yet", right.group());
                continue;
            };
            if past_end(&retired) {
                tracing::debug!(
                    "range {g}: retired range {} reaches past the map's end",
                    right.group()
                );
                continue;
            }
            // The map's version once the group reaches the map's end; a
            // step below it while a range further right is still to come.
            let version = if retired.end == desc.end {
                desc.epoch.version
            } else {
                bounds.epoch.version + 1
            };
            let absorb = AbsorbRange {
                expect: bounds,
                right: right.group(),
                end: retired.end,
                version,
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
    /// committed map gives it or later; or once the committed map places
    /// that range on other nodes only, its merge reported. The keys live on
    /// there, and in that range's log. Before, each stays: the merge is under way, or this
    /// node's replicas have not applied it (after a restart, a group's
    /// replay may lag the others'). Retired here or not: a replica that
    /// missed its retirement, the others deleted, never learns of it.
    pub(super) async fn drop_merged_away(&self, groups: &[GroupId]) {
        if groups.is_empty() {
            return;
        }
        let map = match self.committed_map().await {
            Ok((_, map)) => map,
            Err(e) => {
                tracing::debug!("groups {groups:?} outside the map: no committed map: {e}");
                return;
            }
        };
        for &g in groups.iter().filter(|&&g| map.get(g).is_none()) {
            let Some(r) = self.group(g) else { continue };
            // An id the map never handed out: a group a test or tool
            // started outside it.
            if g >= map.next_id() {
                continue;
            }
            let start = r.bounds().start;
            // A replica that never got its range's state (started empty by
            // a peer's message, its bounds still the whole keyspace's: no
            // range but 0 starts at the empty key) holds nothing to keep.
            if start.is_empty() {
                self.delete_merged_away(g, 0).await;
                continue;
            }
            let taker = map.route(&start);
            // Kept until the map has the merge reported (the report is made
            // by a node that holds a replica of both, as this one may be).
            let absorbed = !map.is_merging(taker.id)
                && self.group(taker.id).is_some_and(|t| {
                    let b = t.bounds();
                    b.contains(&start) && b.epoch.version >= taker.epoch.version
                });
            // Or the range that took its keys is no longer placed here (it
            // moved away after the merge, or this replica was one a move
            // had left here before it): its replicas elsewhere hold the
            // keys, and this node will never read them.
            let me = self.0.id;
            let placed_here = taker.voters.contains(&me) || taker.learners.contains(&me);
            let absorbed = absorbed || (!map.is_merging(taker.id) && !placed_here);
            if !absorbed {
                tracing::debug!(
                    "range {g} outside the map is kept: range {} (merging: {}, here {:?}) \
                     has not absorbed it",
                    taker.id,
                    map.is_merging(taker.id),
                    self.group(taker.id).map(|t| t.bounds())
                );
                continue;
            }
            self.delete_merged_away(g, taker.id).await;
        }
    }

    /// Stops this node's replica of group `g`, merged into `taker`, and
    /// deletes its files.
    async fn delete_merged_away(&self, g: GroupId, taker: RangeId) {
        let Some(replica) = self.remove_group(g) else {
            return;
        };
        replica.shutdown().await;
        match self.delete_group_files(g) {
            Ok(()) => {
                self.0.counts.deleted.fetch_add(1, Ordering::Relaxed);
                tracing::info!("range {g} merged into range {taker}: its replica here is deleted");
            }
            Err(e) => tracing::warn!("range {g} merged away; deleting its files: {e}"),
        }
    }

    /// Merges each range this node leads with the range after it when
    /// both are far below the split size: their keys and values together
    /// below the `merge_bytes` setting, fewer requests a second together
    /// than half the split load (where splits by load are on), neither
    /// pinned by a snapshot (a merge ends what a snapshot can read of
    /// them), and both settled (bounds as the map gives them, here). Two
    /// on different nodes are lined up first (`line_up`), then merge. One
    /// step a turn; range 0's right neighbour merges only where it is on
    /// every node. Once a second, after the splits.
    pub(super) async fn merge_small(&self) {
        let (limit, split_load) = match self.0.template.lock().as_ref() {
            Some(t) if t.merge_bytes > 0 => (t.merge_bytes, t.split_load),
            _ => return,
        };
        let map = self.range_map();
        // Bounds as the map gives them, no merge under way, no snapshot
        // pinned, and the group's members the map's (a move carried out).
        let settled = |r: &Replica, d: &crate::ranges::RangeDesc| {
            let b = r.bounds();
            let voters = sorted(&voter_ids(r));
            !b.retired
                && r.is_voter()
                && b.start == d.start
                && b.end == d.end
                && b.epoch.version == d.epoch.version
                && !map.is_merging(d.id)
                && r.snapshot_pins() == 0
                && voters == sorted(&d.voters)
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
            if !settled(&l, left) {
                continue;
            }
            if !same_nodes {
                if self.line_up(&map, (left, right), &l, limit).await {
                    return;
                }
                continue;
            }
            let Some(r) = self.group(right.id) else {
                continue;
            };
            if !settled(&r, right) {
                continue;
            }
            if split_load > 0 && l.load().rate() + r.load().rate() >= split_load / 2 {
                continue;
            }
            let Some(bytes) = l
                .bytes_below(limit)
                .and_then(|a| r.bytes_below(limit - a).map(|b| a + b))
            else {
                continue;
            };
            match self.merge_decided(left, right, Pinned::Refuse).await {
                Ok(()) => tracing::info!(
                    "ranges {} and {} held {bytes} bytes of keys and values together \
                     (fewer than {limit}): merged",
                    left.id,
                    right.id
                ),
                Err(e) => tracing::debug!("range {}: a merge waits: {e}", left.id),
            }
            return;
        }
    }

    /// Two neighbours on different nodes, small enough together to merge:
    /// one is placed on the other's nodes (a move, carried out by its
    /// leader as any other), after which they merge. Which one, and
    /// whether at all, `ranges::line_up` decides from the map (the
    /// placement settled now and once merged; each range moved by one
    /// pair at most). `l` is this node's replica of the left range, its
    /// leader. Whether a move was asked for.
    async fn line_up(
        &self,
        map: &crate::ranges::RangeMap,
        (left, right): (&RangeDesc, &RangeDesc),
        l: &Replica,
        limit: u64,
    ) -> bool {
        if !right.learners.is_empty() || !left.learners.is_empty() {
            return false;
        }
        let Some(a) = l.bytes_below(limit) else {
            return false;
        };
        let Some(b) = self.range_bytes_below(right, limit - a).await else {
            return false;
        };
        let replicas = self
            .0
            .template
            .lock()
            .as_ref()
            .map_or(0, |t| t.range_replicas);
        let Some(meta) = self.group(0) else {
            return false;
        };
        let members = voter_ids(&meta);
        let Some((range, to)) = crate::ranges::line_up(map, left.id, &members, replicas) else {
            tracing::debug!(
                "ranges {} and {} could merge, but lining them up would unbalance the nodes \
                 (or the range on the left of range {} takes it first)",
                left.id,
                right.id,
                left.id
            );
            return false;
        };
        match self.set_replicas(range, to.clone(), Vec::new()).await {
            Ok(()) => tracing::info!(
                "ranges {} and {} hold {} bytes together: range {range} goes to nodes {to:?} \
                 to merge",
                left.id,
                right.id,
                a + b,
            ),
            Err(e) => tracing::debug!("range {range}: lining up for a merge waits: {e}"),
        }
        true
    }

    /// Whether range `desc`'s group, as its leader has committed its
    /// membership, is on the map's nodes (voters, no learner).
    async fn members_are_the_maps(&self, desc: &RangeDesc) -> bool {
        let want = sorted(&desc.voters);
        if !desc.learners.is_empty() {
            return false;
        }
        if let Some(members) = self.group(desc.id).and_then(|r| r.committed_members()) {
            return sorted(&members) == want;
        }
        self.ask_in_turn(
            desc.id,
            &desc.voters,
            super::ASK_TIMEOUT,
            || Request::Members,
            |answer| match answer {
                Response::Members(Some(members)) => Some(sorted(&members) == want),
                _ => None,
            },
        )
        .await
        .unwrap_or(false)
    }

    /// [`Replica::bytes_below`] of range `desc`: at this node's replica of
    /// it, else asked of its voters in turn.
    async fn range_bytes_below(&self, desc: &crate::ranges::RangeDesc, limit: u64) -> Option<u64> {
        if let Some(r) = self.group(desc.id).filter(|r| r.is_voter()) {
            return r.bytes_below(limit);
        }
        self.ask_in_turn(
            desc.id,
            &desc.voters,
            super::ASK_TIMEOUT,
            || Request::Bytes(limit),
            |answer| match answer {
                Response::Bytes(b) => Some(b),
                _ => None,
            },
        )
        .await
        .flatten()
    }

    /// Refuses a split or merge (`verb`) of range `desc` while a snapshot
    /// pins it (asked of its voters, [`Host::range_pins`]), saying `why`,
    /// unless `pinned` forces it.
    pub(super) async fn refuse_if_pinned(
        &self,
        desc: &RangeDesc,
        pinned: Pinned,
        why: &str,
        verb: &str,
    ) -> Result<(), ClusterError> {
        if pinned == Pinned::Force {
            return Ok(());
        }
        let pins = self.range_pins(desc).await?;
        if pins == 0 {
            return Ok(());
        }
        Err(ClusterError::Refused(format!(
            "range {} is pinned by {pins} snapshot timestamp(s): {why}; release the snapshots \
             (SNAPSHOT RELEASE) or wait for their end, or {verb} with FORCE",
            desc.id
        )))
    }

    /// The most snapshot timestamps any voter of range `desc` holds pinned
    /// ([`Replica::snapshot_pins`]): this node's replica counted as it
    /// stands, every other voter asked. A pin reaches each replica through
    /// the range's log, so a voter behind may not hold it yet: the most of
    /// all is the one that counts. A voter that cannot be reached is left
    /// out, so that a node down does not hold a split or merge back: if it
    /// alone held a pin (the others behind), the change goes ahead as a
    /// forced one would. A voter that has not started its replica yet (a
    /// range just split off) holds none: a replica started later does not
    /// pin as it replays. Refused if no voter answered.
    pub(super) async fn range_pins(
        &self,
        desc: &crate::ranges::RangeDesc,
    ) -> Result<usize, ClusterError> {
        let addrs = self
            .group(0)
            .map(|m| super::member_addrs(&m))
            .unwrap_or_default();
        let mut asks = tokio::task::JoinSet::new();
        let mut most = 0;
        let mut silent = Vec::new();
        for &v in &desc.voters {
            if v == self.0.id {
                most = most.max(self.group(desc.id).map_or(0, |r| r.snapshot_pins()));
                continue;
            }
            let Some(addr) = addrs.get(&v).cloned() else {
                silent.push(v);
                continue;
            };
            let transport = std::sync::Arc::clone(&self.0.transport);
            let req = Request::for_group(desc.id, Request::Pins);
            asks.spawn(async move { (v, transport.call(v, &addr, req, super::ASK_TIMEOUT).await) });
        }
        while let Some(answer) = asks.join_next().await {
            match answer {
                Ok((_, Ok(Response::Pins(n)))) => most = most.max(n),
                Ok((_, Ok(Response::NoSuchGroup(_)))) => {}
                Ok((v, _)) => silent.push(v),
                Err(e) => {
                    return Err(ClusterError::Unknown(format!("a pins ask failed: {e}")));
                }
            }
        }
        if silent.len() == desc.voters.len() {
            return Err(ClusterError::Refused(format!(
                "no voter of range {} answered whether a snapshot pins it; try again, or use \
                 FORCE",
                desc.id
            )));
        }
        if !silent.is_empty() {
            tracing::debug!(
                "voters {silent:?} of range {} did not answer whether a snapshot pins it",
                desc.id
            );
        }
        Ok(most)
    }
}

/// The voters of `r`'s group, as its replica knows them.
fn voter_ids(r: &Replica) -> Vec<crate::types::NodeId> {
    r.status()
        .nodes
        .iter()
        .filter(|n| n.2)
        .map(|n| n.0)
        .collect()
}

fn sorted(v: &[crate::types::NodeId]) -> Vec<crate::types::NodeId> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v
}
