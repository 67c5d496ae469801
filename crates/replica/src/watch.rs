//! The health watch: a task that finds a node without a leader for
//! [`NO_LEADER_REPORT`], or holding a membership its `--peers`
//! contradicts, puts the reason together from what the network noted per
//! peer ([`Health`]), logs it, and keeps it as [`crate::Status::problem`]
//! (`cluster_problem` in `INFO replication`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::ServerState;
use tokio::time::Instant;

use crate::health::{NO_LEADER_REPORT, peers_disagreement};
use crate::replica::Replica;
use crate::types::NodeId;

/// While a problem lasts its warning is logged again this often (its
/// reason may have changed; the log must not fill with one line a second).
const REPEAT_WARNING: Duration = Duration::from_secs(30);
/// How often the watch looks.
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// How long [`Replica::ask_membership`] waits for each voter's answer.
const ASK_MEMBERSHIP_TIMEOUT: Duration = Duration::from_secs(2);

impl Replica {
    /// Watches this node for a problem that keeps it from joining or
    /// electing (see the module's documentation), on the current runtime,
    /// until the node stops. `peers` is its `--peers` (empty without).
    pub fn watch(&self, peers: Vec<(NodeId, String)>) {
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let mut leaderless_since: Option<Instant> = None;
            let mut warned: Option<Instant> = None;
            let mut silent = BTreeMap::new();
            loop {
                tokio::time::sleep(WATCH_EVERY).await;
                let Some(inner) = weak.upgrade() else { return };
                let replica = Replica { inner };
                replica.watch_followers(&mut silent);
                let Some(found) = replica.look(&peers, &mut leaderless_since) else {
                    return;
                };
                // Swapped in first, and the lock let go: the line that
                // ends a problem reads the status, which takes it again.
                let before =
                    std::mem::replace(&mut *replica.inner.health.problem.lock(), found.clone());
                match (&found, before.is_some()) {
                    (Some(p), _) => {
                        let now = Instant::now();
                        if warned.is_none_or(|w| now - w >= REPEAT_WARNING) {
                            // A node started without --peers waits to be
                            // added: what it says is a reminder, not a fault.
                            let spare = peers.is_empty() && !replica.is_member();
                            if spare {
                                tracing::info!("cluster: {p}");
                            } else {
                                tracing::warn!("cluster problem: {p}");
                            }
                            warned = Some(now);
                        }
                    }
                    (None, true) => {
                        tracing::info!("cluster problem over: {}", replica.status_line());
                        warned = None;
                    }
                    (None, false) => {}
                }
            }
        });
    }

    /// What the watch finds now: Some(None) when all is well, None once the
    /// node stopped.
    fn look(
        &self,
        peers: &[(NodeId, String)],
        leaderless_since: &mut Option<Instant>,
    ) -> Option<Option<String>> {
        let m = self.inner.raft.metrics().borrow().clone();
        if m.state == ServerState::Shutdown {
            return None;
        }
        if let Some(removed) = self.removed() {
            return Some(Some(removed));
        }
        let membership = m.membership_config.membership();
        let stored = m.membership_config.log_id().map_or(0, |l| l.index);
        // Judged once the state machine has applied the membership, so
        // that the voters it knows of are complete (a peer removed since
        // is no contradiction).
        let applied = m.last_applied.map_or(0, |l| l.index);
        if !peers.is_empty() && membership.nodes().next().is_some() && applied >= stored {
            let ever = self.inner.sm.ever_voters();
            if let Some(d) = peers_disagreement(peers, membership, &ever) {
                return Some(Some(d));
            }
        }
        let voters: BTreeMap<NodeId, String> = membership
            .voter_ids()
            .filter_map(|id| Some((id, membership.get_node(&id)?.addr.clone())))
            .collect();
        if m.state == ServerState::Leader {
            *leaderless_since = None;
            // openraft 0.9 keeps a leader that lost its quorum leading (it
            // has no check-quorum); its writes time out. Heartbeats go out
            // every 100 ms, so a voter silent for the report time is lost.
            let me = self.inner.id;
            let answering = voters
                .keys()
                .filter(|&&id| id == me || self.inner.health.answered_within(id, NO_LEADER_REPORT))
                .count();
            if answering > voters.len() / 2 {
                return Some(None);
            }
            let lines = self.inner.health.describe(me, &voters);
            return Some(Some(format!(
                "this node leads term {} but only {answering} of its {} voters (itself \
                 included) answered in the last {} s, no majority: {}",
                m.current_term,
                voters.len(),
                NO_LEADER_REPORT.as_secs(),
                lines.join("; ")
            )));
        }
        if m.current_leader.is_some() {
            *leaderless_since = None;
            return Some(None);
        }
        let since = *leaderless_since.get_or_insert_with(Instant::now);
        let waited = since.elapsed();
        if waited < NO_LEADER_REPORT {
            return Some(None);
        }
        let secs = waited.as_secs();
        if membership.nodes().next().is_none() {
            let why = match peers.iter().map(|(id, _)| *id).min() {
                None => format!(
                    "not a member of any cluster after {secs} s: add it on the leader \
                     (`combkv cluster add {}`) or form one (`combkv cluster init`)",
                    self.inner.id
                ),
                Some(first) => format!(
                    "not a member of any cluster after {secs} s: node {first}, the lowest id \
                     in --peers, forms the cluster and has sent this node nothing; \
                     is it running, with the same --peers?"
                ),
            };
            return Some(Some(why));
        }
        let role = match m.state {
            ServerState::Candidate => "a candidate",
            ServerState::Learner => "a learner",
            _ => "a follower",
        };
        let mut why = format!(
            "no leader for {secs} s; this node is {role} in term {}",
            m.current_term
        );
        if !voters.contains_key(&self.inner.id) {
            why.push_str(" and no voter: it waits for the leader to reach it");
        }
        let lines = self.inner.health.describe(self.inner.id, &voters);
        if !lines.is_empty() {
            why.push_str(": ");
            why.push_str(&lines.join("; "));
        }
        Some(Some(why))
    }

    /// On the leader: warns of each voter that has not answered for
    /// [`NO_LEADER_REPORT`] (again every [`REPEAT_WARNING`]) and says when
    /// it answers again. openraft's own lines for this (several a second
    /// per unreachable follower) are filtered below combkv's level.
    /// `silent`: the voters warned of, and when.
    fn watch_followers(&self, silent: &mut BTreeMap<NodeId, Instant>) {
        let m = self.inner.raft.metrics().borrow().clone();
        if m.state != ServerState::Leader {
            silent.clear();
            return;
        }
        let membership = m.membership_config.membership();
        let me = self.inner.id;
        let health = &self.inner.health;
        let voters: Vec<(NodeId, String)> = membership
            .voter_ids()
            .filter(|&id| id != me)
            .filter_map(|id| Some((id, membership.get_node(&id)?.addr.clone())))
            .collect();
        silent.retain(|id, _| {
            let back = voters.iter().any(|(v, _)| v == id)
                && health.answered_within(*id, NO_LEADER_REPORT);
            if back {
                tracing::info!("node {id} answers this leader again");
            }
            !back && voters.iter().any(|(v, _)| v == id)
        });
        let now = Instant::now();
        for (id, addr) in &voters {
            if health.answered_within(*id, NO_LEADER_REPORT)
                || silent.get(id).is_some_and(|w| now - *w < REPEAT_WARNING)
            {
                continue;
            }
            let why = health
                .unreached(*id)
                .map_or_else(String::new, |w| format!(" ({w})"));
            tracing::warn!(
                "node {id} at {addr} has not answered this leader for {} s{why}; writes go on \
                 while a majority answers, with less room for failures: restart it, or \
                 replace it (`combkv cluster remove {id}`, then `cluster add` a new node)",
                NO_LEADER_REPORT.as_secs()
            );
            silent.insert(*id, now);
        }
    }

    /// Asks the voters of this node's membership, in turn, which members
    /// the cluster has: the leader answers once its membership is
    /// committed, and a membership without this node means it was removed.
    /// The removal itself often never reaches the removed node (the leader
    /// stops sending to it once the configuration without it commits), so
    /// without asking it would wait for a leader, or follow one that no
    /// longer replicates to it, forever. A node that holds no membership
    /// yet (it waits to be added) does not ask. An answer from a
    /// membership older than the one this node holds is a stale leader's
    /// (one cut off from a majority that changed the membership since, and
    /// added this node, say): it is passed over, and the next voter asked.
    /// Asked once a second by the node's drivers
    /// (`Host::drop_moved_away`, which also leaves every range when the
    /// answer is no).
    pub(crate) async fn ask_membership(&self) {
        let own = self.membership_log_id();
        let (me, voters) = {
            let metrics = self.inner.raft.metrics();
            let m = metrics.borrow();
            let membership = m.membership_config.membership();
            if m.state == ServerState::Leader || membership.nodes().next().is_none() {
                *self.inner.health.removed.lock() = None;
                return;
            }
            let me = self.inner.id;
            let voters: Vec<(NodeId, String)> = membership
                .voter_ids()
                .filter(|&id| id != me)
                .filter_map(|id| Some((id, membership.get_node(&id)?.addr.clone())))
                .collect();
            (me, voters)
        };
        for (id, addr) in voters {
            let asked = self.inner.transport.call(
                id,
                &addr,
                crate::rpc::Request::MembersAt,
                ASK_MEMBERSHIP_TIMEOUT,
            );
            if let Ok(crate::rpc::Response::MembersAt(Some((at, members)))) = asked.await
                && Some(at) >= own
            {
                *self.inner.health.removed.lock() = (!members.contains(&me)).then(|| {
                    format!(
                        "this node was removed from the cluster: node {id}, its leader, \
                         committed a membership without it ({members:?}); it serves nothing \
                         more. Stop it (its data directory is no longer needed); to serve \
                         from this machine again, add it anew (`combkv cluster add`; an id \
                         that was a voter's is never used again: give it a new one)"
                    )
                });
                return;
            }
        }
    }

    /// Why this node serves nothing more, if its cluster removed it
    /// ([`Replica::ask_membership`]).
    pub fn removed(&self) -> Option<String> {
        self.inner.health.removed.lock().clone()
    }

    /// Whether this node holds a membership (it formed or joined a
    /// cluster).
    fn is_member(&self) -> bool {
        let metrics = self.inner.raft.metrics();
        let m = metrics.borrow();
        m.membership_config.membership().nodes().next().is_some()
    }

    /// The node's role and leader, for the line that ends a problem.
    fn status_line(&self) -> String {
        let s = self.status();
        match s.leader {
            Some(l) => format!("node {l} leads term {}", s.term),
            None => format!("{} in term {}", s.role.as_str(), s.term),
        }
    }

    /// The problem the watch found, if any.
    pub(crate) fn problem(&self) -> Option<String> {
        self.inner.health.problem.lock().clone()
    }
}
