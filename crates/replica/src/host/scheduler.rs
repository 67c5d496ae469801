//! What the meta group's leader decides for the whole cluster, once a
//! second: it asks every member which ranges it leads (which also tells it
//! who is up), takes one step of the placement the `range_replicas`
//! setting asks for (`ranges::next_placement`) over the members that are
//! up, and once placement has settled, one step toward leaders spread
//! evenly (`leaders`). A member that has not answered for
//! `node_down_after` is placed as if it had left the cluster: the ranges
//! it holds get replicas on the others (as PD does for TiKV stores down
//! past `max-store-down-time`), and once it is back, its stale replicas
//! are deleted (`drop_moved_away`) and the balance gives it its share again.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::Host;
use crate::replica::Replica;
use crate::rpc::{Request, Response};
use crate::types::{GroupId, NodeId};

/// How long the meta group's leader waits for a member's answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(1);

impl Host {
    /// One turn of the meta group's leader (see the module's
    /// documentation); nothing on any other node, or while the keyspace
    /// is one range and no placement is asked for.
    pub(super) async fn schedule(&self) {
        let Some(meta) = self.group(0).filter(|g| g.is_leader()) else {
            *self.0.last_seen.lock() = None;
            return;
        };
        let Some(map) = meta.range_map() else { return };
        let replicas = self
            .0
            .template
            .lock()
            .as_ref()
            .map_or(0, |t| t.range_replicas);
        if map.len() < 2 && replicas == 0 {
            return;
        }
        let members: Vec<NodeId> = meta
            .status()
            .nodes
            .iter()
            .filter(|n| n.2)
            .map(|n| n.0)
            .collect();
        let led = self.survey(&meta, &members).await;
        let up = self.members_up(&members);
        if replicas > 0
            && let Some((range, want)) = crate::ranges::next_placement(&map, &up, replicas)
        {
            match self.set_replicas(range, want.clone(), Vec::new()).await {
                Ok(()) => tracing::info!("range {range} is to be placed on nodes {want:?}"),
                Err(e) => tracing::debug!("placing range {range} on {want:?} waits: {e}"),
            }
            return;
        }
        self.balance_leaders(&meta, &map, &led).await;
    }

    /// Asks every member at once which ranges it leads; notes when each
    /// answered. Those that did not answer are left out.
    async fn survey(&self, meta: &Replica, members: &[NodeId]) -> BTreeMap<NodeId, Vec<GroupId>> {
        let addrs = super::member_addrs(meta);
        let mut asks = tokio::task::JoinSet::new();
        for &m in members.iter().filter(|&&m| m != self.0.id) {
            let Some(addr) = addrs.get(&m).cloned() else {
                continue;
            };
            let transport = std::sync::Arc::clone(&self.0.transport);
            asks.spawn(async move {
                let answer = transport
                    .call(m, &addr, Request::Leading, ASK_TIMEOUT)
                    .await;
                (m, answer)
            });
        }
        let mut led = BTreeMap::new();
        led.insert(self.0.id, self.leading());
        while let Some(done) = asks.join_next().await {
            if let Ok((m, Ok(Response::Leading(groups)))) = done {
                led.insert(m, groups);
            }
        }
        let now = Instant::now();
        let mut seen = self.0.last_seen.lock();
        let seen = seen.get_or_insert_with(Default::default);
        for &m in members {
            // A member first met now counts as seen now: a leader that just
            // took over knows nothing older.
            let last = seen.entry(m).or_insert(now);
            if led.contains_key(&m) {
                *last = now;
            }
        }
        led
    }

    /// The members that have answered within `node_down_after` (all of
    /// them when the setting is off).
    fn members_up(&self, members: &[NodeId]) -> Vec<NodeId> {
        let Some(limit) = self
            .0
            .template
            .lock()
            .as_ref()
            .and_then(|t| t.node_down_after)
        else {
            return members.to_vec();
        };
        let seen = self.0.last_seen.lock();
        let Some(seen) = seen.as_ref() else {
            return members.to_vec();
        };
        members
            .iter()
            .copied()
            .filter(|m| {
                let up = seen.get(m).is_none_or(|t| t.elapsed() < limit);
                if !up {
                    tracing::debug!("node {m} has not answered for {limit:?}: placed as gone");
                }
                up
            })
            .collect()
    }
}
