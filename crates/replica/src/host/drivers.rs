//! What every node does in the background to bring the ranges it leads
//! into line with the range map: splits the map recorded (`drive_splits`),
//! replicas the map moved (`drive_replicas`), and ranges grown past the
//! split size (`split_large`) or load (`split_busy`), every 100 ms (sizes
//! and loads once a second); and on the meta group's leader, once a
//! second, the placement of replicas and the spread of leaders
//! (`scheduler`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Host;
use crate::rpc::{Request, Response};
use crate::types::NodeId;

/// Seconds in a row a range's requests must stay at or above the split load
/// before it splits (TiKV waits 10; a shorter wait suits the small
/// clusters combkv runs on, and a spike of a second or two never splits).
const BUSY_SECONDS: u32 = 3;

/// The longest a leader waits for one membership change of its range
/// (adding a replica: its catch-up, 30 s at most, and its promotion; or
/// removing one). openraft has been seen never to answer such a change (a
/// leader removing itself, in the simulation after a whole-cluster crash),
/// and every later step of this node's drivers (deleting replicas among
/// them) waited behind it; abandoned, the change is taken again from what
/// the group shows at the next turn.
const CHANGE_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

impl Host {
    /// Brings the ranges this node leads into line with the range map:
    /// a group whose bounds still hold the start of a range the map has
    /// made since (a split recorded in the map, not yet applied by the
    /// group: its proposer stopped, or this node just became its leader)
    /// splits there, handing the rest to that range. A chain of recorded
    /// splits resolves one split at a time, each new group splitting
    /// further as the map says. A group the map has merged away splits
    /// too, if the map split it first: the part merged is then retired
    /// alone (`drive_merges`). Runs every 100 ms on every node
    /// (`spawn_split_driver`).
    pub(super) async fn drive_splits(&self) {
        if self.groups().iter().all(|&g| g == 0) {
            return;
        }
        let Some(map) = self.group(0).and_then(|g| g.shared_range_map()) else {
            return;
        };
        // The committed map, read once a turn where needed (a group the
        // map here does not know).
        let mut committed = None;
        for g in self.groups() {
            if g == 0 {
                continue;
            }
            // A leader that removed itself (moved away) leads on for a
            // moment outside its group: it changes nothing more.
            let Some(r) = self.group(g).filter(|r| r.is_leader() && r.is_voter()) else {
                continue;
            };
            let bounds = r.bounds();
            if bounds.retired {
                continue;
            }
            // Only a map newer than the group's bounds says where to split:
            // this node's copy of the map may lag the group (the map
            // records a split before the group applies it, but a node
            // applies the two logs at its own pace).
            let map = match map.get(g) {
                Some(desc) if desc.epoch.version > bounds.epoch.version => Arc::clone(&map),
                Some(_) => continue,
                // Merged away (ids are never reused), if the committed map
                // does not hold it either; a merged-away group splits if
                // the map split it before the merge.
                None => {
                    if committed.is_none() {
                        committed = Some(self.committed_map().await.ok().map(|(_, m)| m));
                    }
                    match committed.clone().flatten() {
                        Some(m) if m.get(g).is_none() => m,
                        _ => continue,
                    }
                }
            };
            let inside = map
                .spanning(
                    std::ops::Bound::Excluded(bounds.start.as_slice()),
                    bounds
                        .end
                        .as_deref()
                        .map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded),
                )
                .find(|d| {
                    d.start.as_slice() > bounds.start.as_slice() && bounds.contains(&d.start)
                });
            let Some(next) = inside else { continue };
            let (at, new_id) = (next.start.clone(), next.id);
            match r.split_range(&at, new_id).await {
                Ok(()) => tracing::info!("range {g} split at the map's record, into {new_id}"),
                Err(e) => tracing::debug!("range {g}: the map's split into {new_id} waits: {e}"),
            }
        }
    }

    /// Moves the group of each range this node leads (range 0 aside)
    /// toward the replicas the map wants, one step per range and turn:
    /// first a wanted node that is no member is added (a learner that
    /// catches up, then a voter; it starts its replica when the leader's
    /// first message reaches it, since the map names it), and only once
    /// every wanted voter votes is a member the map no longer wants
    /// removed, so the group never has fewer voters than the map wants.
    async fn drive_replicas(&self) {
        // A node of one range (every node until ranges are split) has
        // nothing to do: checked before anything is read.
        if self.groups().iter().all(|&g| g == 0) {
            return;
        }
        let Some(meta) = self.group(0) else { return };
        let Some(map) = meta.range_map() else { return };
        let addrs = super::member_addrs(&meta);
        for g in self.groups() {
            if g == 0 {
                continue;
            }
            let (Some(r), Some(desc)) = (self.group(g).filter(|r| r.is_leader()), map.get(g))
            else {
                continue;
            };
            // A merge or split the map records and the group has not
            // carried out yet: the replicas stay until it has (the merge
            // takes its keys from a replica of the range merged away on
            // the leader's node).
            let bounds = r.bounds();
            if bounds.start != desc.start || bounds.end != desc.end {
                continue;
            }
            let members = r.status().nodes;
            // A leader that removed itself leads on for a moment, outside
            // the group: it changes nothing more.
            if !members
                .iter()
                .any(|(m, _, voter)| *m == self.0.id && *voter)
            {
                continue;
            }
            // A wanted voter that does not vote yet (absent, or a learner
            // whose add was cut short: adding it again resumes the wait).
            let votes = |id: &NodeId| members.iter().any(|(m, _, voter)| m == id && *voter);
            if let Some(&add) = desc.voters.iter().find(|id| !votes(id)) {
                let Some(addr) = addrs.get(&add) else {
                    tracing::warn!(
                        "range {g}: node {add} is no member of the cluster; it cannot hold a \
                         replica until it is added"
                    );
                    continue;
                };
                let adding = r.add_range_replica(add, addr, std::time::Duration::from_secs(30));
                match tokio::time::timeout(CHANGE_LIMIT, adding).await {
                    Ok(Ok(())) => {
                        self.0.counts.added.fetch_add(1, Ordering::Relaxed);
                        tracing::info!("range {g}: node {add} holds a replica now");
                    }
                    Ok(Err(e)) => tracing::warn!("range {g}: adding node {add}: {e}"),
                    Err(_) => tracing::warn!(
                        "range {g}: adding node {add} went unanswered for {} s: taken again \
                         at the next turn",
                        CHANGE_LIMIT.as_secs()
                    ),
                }
                continue;
            }
            let all_vote = desc
                .voters
                .iter()
                .all(|v| members.iter().any(|(m, _, voter)| m == v && *voter));
            // Others first: the leader removes itself last, once no other
            // change is left for it to make.
            let unwanted = |m: &NodeId| !desc.voters.contains(m) && !desc.learners.contains(m);
            let extra = members
                .iter()
                .map(|(m, _, _)| *m)
                .filter(unwanted)
                .min_by_key(|m| *m == self.0.id);
            if all_vote && let Some(gone) = extra {
                match tokio::time::timeout(CHANGE_LIMIT, r.remove_node(gone)).await {
                    Ok(Ok(())) => {
                        self.0.counts.removed.fetch_add(1, Ordering::Relaxed);
                        tracing::info!("range {g}: node {gone} no longer holds a replica");
                    }
                    Ok(Err(e)) => tracing::warn!("range {g}: removing node {gone}: {e}"),
                    Err(_) => tracing::warn!(
                        "range {g}: removing node {gone} went unanswered for {} s: taken again \
                         at the next turn",
                        CHANGE_LIMIT.as_secs()
                    ),
                }
            }
        }
    }

    /// Splits each range this node leads whose keys and values take more
    /// than the `split_bytes` setting, at the key that halves those bytes,
    /// recording the split in the map first as [`Host::split`] does. A
    /// range a snapshot pins waits (as a merge does): the new range would
    /// start with no past, and the snapshot's reads of its keys would be
    /// refused. The
    /// store's own memory figure only filters (it falls late after a split,
    /// as deleted keys' buffers are reclaimed); the bytes are counted in one
    /// scan. A range of one key cannot split, whatever its size.
    async fn split_large(&self) {
        let Some(limit) = self
            .0
            .template
            .lock()
            .as_ref()
            .map(|t| t.split_bytes)
            .filter(|&b| b > 0)
        else {
            return;
        };
        for g in self.groups() {
            let Some(r) = self
                .group(g)
                .filter(|r| r.is_leader() && r.is_voter() && !r.bounds().retired)
            else {
                continue;
            };
            let store = r.current_store();
            let m = store.memory();
            if m.node_bytes + m.value_bytes <= limit {
                continue;
            }
            let size = |it: &combkv::ItemView<'_>| (it.key.len() + it.value.len()) as u64;
            let all = combkv::Range::all();
            let mut total = 0;
            let _ = store.scan(&all, |it| {
                total += size(&it);
                true
            });
            if total <= limit {
                continue;
            }
            let start = r.bounds().start;
            let (mut seen, mut at) = (0, None);
            let _ = store.scan(&all, |it| {
                seen += size(&it);
                if seen * 2 >= total && it.key > start.as_slice() {
                    at = Some(it.key.to_vec());
                    return false;
                }
                true
            });
            let Some(at) = at else { continue };
            if r.snapshot_pins() > 0 {
                tracing::debug!(
                    "range {g} holds {total} bytes of keys and values (more than {limit}): its \
                     split waits until no snapshot pins it"
                );
                continue;
            }
            // Its pins were checked here just now: the voters are not asked
            // again (a voter down would hold every split by size back).
            match self.split_when(g, &at, super::Pinned::Force).await {
                Ok(new) => tracing::info!(
                    "range {g} held {total} bytes of keys and values (more than {limit}): \
                     split into range {new}"
                ),
                Err(e) => tracing::debug!("range {g}: a split by size waits: {e}"),
            }
        }
    }

    /// Splits each range this node leads whose group has applied at least
    /// the `split_load` setting's requests a second (writes applied, reads
    /// served here) for `BUSY_SECONDS` takes
    /// in a row, at the middle of its sampled keys (`load`), recording the
    /// split in the map first as [`Host::split`] does. Every replica's
    /// count is taken, so that a new leader starts from its last second.
    /// A range a snapshot pins waits, as in [`Host::split_large`]. Once a
    /// second.
    async fn split_busy(&self) {
        let Some(limit) = self
            .0
            .template
            .lock()
            .as_ref()
            .map(|t| t.split_load)
            .filter(|&l| l > 0)
        else {
            return;
        };
        for g in self.groups() {
            let Some(r) = self.group(g) else { continue };
            let load = r.load();
            let (rate, busy) = load.take(limit);
            if busy < BUSY_SECONDS || !r.is_leader() || r.bounds().retired {
                continue;
            }
            if r.snapshot_pins() > 0 {
                tracing::debug!(
                    "range {g} takes {rate} requests a second: its split waits until no \
                     snapshot pins it"
                );
                continue;
            }
            let bounds = r.bounds();
            let Some(at) = load.middle(&bounds.start, bounds.end.as_deref()) else {
                continue;
            };
            // Its pins were checked here just now: the voters are not asked
            // again (a voter down would hold every split by load back).
            match self.split_when(g, &at, super::Pinned::Force).await {
                Ok(new) => {
                    load.reset();
                    tracing::info!(
                        "range {g} took {rate} requests a second for {busy} s (the split \
                         load is {limit}): split into range {new} at the middle of its keys"
                    );
                }
                Err(e) => tracing::debug!("range {g}: a split by load waits: {e}"),
            }
        }
    }

    /// Deletes the replicas a move left on this node: a group the range
    /// map names no replica of here, whose leader answers, with its
    /// membership committed, that this node is no member. The removal
    /// itself often never reaches the removed node (the leader stops
    /// sending to it once the configuration without it commits), so the
    /// node asks. Its files go too: the group's directory is first renamed
    /// aside (a restart never starts it again), then its log and the rest
    /// removed. Once a second on every node.
    pub(super) async fn drop_moved_away(&self) {
        let Some(meta) = self.group(0) else { return };
        // A node removed from the cluster often never applies its removal
        // (its map stays as it was): it asks, split or not (and says so,
        // `Replica::removed`), and if it is out, it leaves every range, so
        // that their other replicas elect leaders that follow the map's
        // replacements for it.
        meta.ask_membership().await;
        let out_of_cluster = meta.removed().is_some();
        self.0.left_cluster.store(out_of_cluster, Ordering::Relaxed);
        if self.groups().iter().all(|&g| g == 0) {
            return;
        }
        let Some(map) = meta.range_map() else { return };
        let me = self.0.id;
        let unknown: Vec<_> = self
            .groups()
            .into_iter()
            .filter(|&g| g != 0 && map.get(g).is_none())
            .collect();
        self.drop_merged_away(&unknown).await;
        for g in self.groups() {
            let Some(desc) = map.get(g).filter(|_| g != 0) else {
                continue;
            };
            let named = desc.voters.contains(&me) || desc.learners.contains(&me);
            if named && !out_of_cluster {
                continue;
            }
            let since = self.group(g).and_then(|r| r.membership_log_id());
            if !out_of_cluster && !self.no_member(g, &desc.voters, since).await {
                continue;
            }
            // Stopped before the answer that decides: a leader that adds
            // this node back counts only on what a replica it added
            // acknowledged, and the one deleted here acknowledges nothing
            // after this (deleting a replica a leader counts on would take
            // entries from under it).
            let Some(replica) = self.remove_group(g) else {
                continue;
            };
            replica.shutdown().await;
            let gone = self.no_member(g, &desc.voters, since).await
                && (out_of_cluster || !self.expects(g));
            if !gone {
                if out_of_cluster {
                    tracing::info!(
                        "this node left the cluster: its replica of range {g} is stopped, \
                         kept until the range's leader confirms it is no member"
                    );
                } else {
                    // Named again, or added back, meanwhile: it goes on.
                    self.ensure_group(g).await;
                }
                continue;
            }
            match self.delete_group_files(g) {
                Ok(()) => {
                    self.0.counts.deleted.fetch_add(1, Ordering::Relaxed);
                    if out_of_cluster {
                        tracing::info!(
                            "this node left the cluster: its replica of range {g} is deleted"
                        );
                    } else {
                        tracing::info!("range {g} moved away: its replica here is deleted");
                    }
                }
                Err(e) => tracing::warn!("range {g} moved away; deleting its files: {e}"),
            }
        }
    }

    /// Whether group `g`'s leader, asked through the nodes `ask`, answers
    /// with a committed membership that does not hold this node. An answer
    /// from a membership older than `since` (the one this node's replica
    /// holds) is a stale leader's, passed over.
    async fn no_member(
        &self,
        g: crate::types::GroupId,
        ask: &[NodeId],
        since: Option<crate::types::LogId>,
    ) -> bool {
        self.ask_in_turn(
            g,
            ask,
            super::MEMBER_TIMEOUT,
            || Request::MembersAt,
            |answer| match answer {
                Response::MembersAt(Some((at, members))) if Some(at) >= since => {
                    Some(!members.contains(&self.0.id))
                }
                _ => None,
            },
        )
        .await
        .unwrap_or(false)
    }

    fn driving(&self, step: &'static str) {
        *self.0.driving.lock() = (step, tokio::time::Instant::now());
    }

    /// Runs one step of the drivers, named for `drivers_step`.
    async fn step(&self, name: &'static str, step: impl std::future::Future<Output = ()>) {
        self.driving(name);
        step.await;
    }

    /// The step this node's drivers are in, and for how long they have
    /// been in it (a step that never ends would show here).
    pub fn drivers_step(&self) -> (&'static str, std::time::Duration) {
        let (step, since) = *self.0.driving.lock();
        (step, since.elapsed())
    }

    pub(super) fn spawn_drivers(&self) {
        // The stores' recent past, for reads at a timestamp: its own task,
        // so that a slow turn of the drivers below never leaves a store
        // without a recent hold.
        let host = Arc::downgrade(&self.0);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                let Some(inner) = host.upgrade() else { return };
                let host = Host(inner);
                let split = host.range_map().len() > 1;
                let replicas: Vec<_> = host
                    .groups()
                    .into_iter()
                    .filter_map(|g| host.group(g))
                    .collect();
                let asked = replicas.iter().any(|r| r.past_asked());
                for r in replicas {
                    r.keep_past(split, asked);
                }
            }
        });
        let host = Arc::downgrade(&self.0);
        tokio::spawn(async move {
            for turn in 0u64.. {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                let Some(inner) = host.upgrade() else { return };
                let host = Host(inner);
                host.step("splits", host.drive_splits()).await;
                host.step("merges", host.drive_merges()).await;
                host.step("replicas", host.drive_replicas()).await;
                // Sizes are counted by scans: once a second.
                if turn % 10 == 0 {
                    host.step("splits by size", host.split_large()).await;
                    host.step("splits by load", host.split_busy()).await;
                    host.step("merges of small ranges", host.merge_small())
                        .await;
                    host.step("placement", host.schedule()).await;
                }
                if turn % 10 == 5 {
                    host.step("replicas moved or merged away", host.drop_moved_away())
                        .await;
                }
                host.driving("waiting");
            }
        });
    }
}
