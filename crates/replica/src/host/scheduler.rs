//! What the meta group's leader decides for the whole cluster, once a
//! second: it asks every member which ranges it leads and the bytes each
//! holds (which also tells it who is up), takes one step of the placement
//! the `range_replicas` setting asks for (`ranges::next_placement`) over
//! the members that are up; once that has settled, one step toward nodes
//! holding similar bytes (`ranges::next_byte_move`), and once that has,
//! one toward leaders spread evenly (`leaders`), by count and then, where
//! splits by load are on, by load. A member that has not answered for
//! `node_down_after` is placed as if it had left the cluster: the ranges
//! it holds get replicas on the others (as PD does for TiKV stores down
//! past `max-store-down-time`), and once it is back, its stale replicas
//! are deleted (`drop_moved_away`) and the balance gives it its share again.
//! While a snapshot pins the ranges, only the placement steps that keep
//! ranges' replicas are taken: moves for balance wait for it to end.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::Host;
use crate::replica::Replica;
use crate::rpc::{Request, Response};
use crate::types::{GroupId, NodeId};

/// How long a member that hung up on [`Request::Held`] (a build from
/// before it) is asked [`Request::Leading`] instead: ranges it leads have
/// no size meanwhile, and nothing moves by bytes. Each hang-up costs a
/// connection and a refusal logged and counted there, so it is asked
/// again only after this.
const HELD_UNKNOWN_FOR: Duration = Duration::from_secs(600);

/// What the survey of the members found: the ranges each that answered
/// leads, and the bytes and committed members of each range whose leader
/// said.
struct Survey {
    led: BTreeMap<NodeId, Vec<GroupId>>,
    sizes: BTreeMap<GroupId, u64>,
    members: BTreeMap<GroupId, Option<Vec<NodeId>>>,
}

impl Survey {
    fn took(&mut self, node: NodeId, held: Vec<crate::rpc::HeldRange>) {
        self.led
            .insert(node, held.iter().map(|h| h.group).collect());
        for h in held {
            self.sizes.insert(h.group, h.bytes);
            self.members.insert(h.group, h.members);
        }
    }

    /// Whether every range but range 0 is where the map places it, as its
    /// leader has committed its membership: no move under way (the map
    /// names where a range goes at once; its leader moves it after).
    fn settled(&self, map: &crate::ranges::RangeMap) -> bool {
        map.ranges().filter(|r| r.id != 0).all(|r| {
            let mut want: Vec<NodeId> = r.voters.iter().chain(&r.learners).copied().collect();
            want.sort_unstable();
            self.members.get(&r.id) == Some(&Some(want))
        })
    }
}

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
        let survey = self.survey(&meta, &members).await;
        let up = self.members_up(&members);
        // A snapshot pins every range for its life, on the replicas that
        // applied its floor. A replica moved meanwhile starts on its new
        // node with no pin, and the one it replaces takes its pin away, so
        // once none is left the snapshot's reads of the range fail. While
        // this node's replicas hold a pin (range 0's does for every live
        // snapshot), only the steps that keep ranges' replicas are taken
        // (a node gone or down); moves for balance wait for it to end.
        let pinned = self
            .groups()
            .into_iter()
            .any(|g| self.group(g).is_some_and(|r| r.snapshot_pins() > 0));
        let step = if pinned {
            crate::ranges::next_replacement(&map, &up, replicas)
        } else {
            crate::ranges::next_placement(&map, &up, replicas)
        };
        if replicas > 0
            && let Some((range, want)) = step
        {
            match self.set_replicas(range, want.clone(), Vec::new()).await {
                Ok(()) => tracing::info!("range {range} is to be placed on nodes {want:?}"),
                Err(e) => tracing::debug!("placing range {range} on {want:?} waits: {e}"),
            }
            return;
        }
        // By bytes only while every member up answered this turn (a move
        // onto a node that does not answer would wait on its catch-up) and
        // no move is under way.
        if replicas > 0
            && !pinned
            && up.iter().all(|m| survey.led.contains_key(m))
            && survey.settled(&map)
        {
            // Sizes here are the stores' memory, above the keys and values a
            // merge counts (up to about four times, with small items): a
            // lined-up pair under four times the merge size is taken as
            // waiting to merge.
            let merge_bytes = self.0.template.lock().as_ref().map_or(0, |t| t.merge_bytes);
            let merge_bytes = merge_bytes.saturating_mul(4);
            let plan =
                crate::ranges::next_byte_move(&map, &up, replicas, &survey.sizes, merge_bytes);
            if !plan.is_empty() {
                // A swap's two ranges are placed one after the other, in
                // this turn: the map holds both (counts as they were)
                // before the next turn looks. One refused leaves the other
                // placed alone, one replica off the count rule, which
                // the next turn's placement puts right.
                for (range, want) in plan {
                    match self.set_replicas(range, want.clone(), Vec::new()).await {
                        Ok(()) => tracing::info!(
                            "range {range} is to be placed on nodes {want:?} (by bytes)"
                        ),
                        Err(e) => {
                            tracing::debug!("placing range {range} on {want:?} waits: {e}");
                            break;
                        }
                    }
                }
                return;
            }
        }
        if self.balance_leaders(&meta, &map, &survey.led).await {
            return;
        }
        let split_load = self.0.template.lock().as_ref().map_or(0, |t| t.split_load);
        if split_load > 0 {
            self.balance_leader_load(&meta, &map, &survey.led, split_load)
                .await;
        }
    }

    /// Asks every member at once which ranges it leads, and their bytes;
    /// notes when each answered. Those that did not answer are left out.
    async fn survey(&self, meta: &Replica, members: &[NodeId]) -> Survey {
        let addrs = super::member_addrs(meta);
        let mut asks = tokio::task::JoinSet::new();
        let now = Instant::now();
        self.0.held_unknown.lock().retain(|_, until| *until > now);
        for &m in members.iter().filter(|&&m| m != self.0.id) {
            let Some(addr) = addrs.get(&m).cloned() else {
                continue;
            };
            let transport = std::sync::Arc::clone(&self.0.transport);
            let held = !self.0.held_unknown.lock().contains_key(&m);
            asks.spawn(async move {
                let req = if held {
                    Request::Held
                } else {
                    Request::Leading
                };
                let ask = |req| transport.call(m, &addr, req, super::ASK_TIMEOUT);
                let mut answer = ask(req).await;
                // A hang-up (a node that stopped or restarted mid-call, or
                // one of an older build): asked again on a new connection,
                // and on a second hang-up only which ranges it leads. An
                // answer to that alone is an older build's.
                let mut older = false;
                if held && answer.as_ref().is_err_and(crate::network::peer_hung_up) {
                    answer = ask(Request::Held).await;
                    if answer.as_ref().is_err_and(crate::network::peer_hung_up) {
                        answer = ask(Request::Leading).await;
                        older = matches!(answer, Ok(Response::Leading(_)));
                    }
                }
                (m, older, answer)
            });
        }
        let mut survey = Survey {
            led: BTreeMap::new(),
            sizes: BTreeMap::new(),
            members: BTreeMap::new(),
        };
        survey.took(self.0.id, self.held_ranges());
        while let Some(done) = asks.join_next().await {
            let Ok((m, older, answer)) = done else {
                continue;
            };
            if older {
                tracing::info!(
                    "node {m} hung up on the question of what it holds and answered which \
                     ranges it leads: an older build; asked only that for \
                     {HELD_UNKNOWN_FOR:?}, and nothing is placed by bytes meanwhile"
                );
                self.0
                    .held_unknown
                    .lock()
                    .insert(m, Instant::now() + HELD_UNKNOWN_FOR);
            }
            match answer {
                Ok(Response::Held(held)) => survey.took(m, held),
                Ok(Response::Leading(groups)) => {
                    survey.led.insert(m, groups);
                }
                _ => {}
            }
        }
        let led = &survey.led;
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
        survey
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
