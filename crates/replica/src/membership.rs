//! Membership changes that cannot make the cluster worse than it was.
//!
//! `add_node` makes the new node a learner, waits until the leader has
//! replicated to it everything it had when the node was added, and only
//! then makes it a voter: a node that is not running, or at a wrong
//! address, never counts towards a quorum. The wait watches the leader's
//! replication metrics with a deadline of the caller's; openraft's
//! blocking `add_learner` waits with no deadline (a century), and a
//! process whose event loop waits in it never stops. A learner that did
//! not catch up in time is removed again, so the cluster is left as it
//! was: no voter changed, and no replication to a dead address that logs
//! an error every half second.
//!
//! Ids are never reused: an id in the membership, voter or learner, is
//! refused, and so is the id of any voter removed before (the state
//! machine keeps every id that was ever a voter, see
//! `StateMachine::ever_voters`). A node under a removed voter's id could
//! vote a second time in a term the old one voted in. A learner never
//! votes, so the id of one that was removed (an add that timed out) may be
//! added again.

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

use openraft::{BasicNode, ChangeMembers, ServerState};
use tokio::time::Instant;

use crate::error::{ClusterError, write_error};
use crate::health::{peers_disagreement, same_addr};
use crate::replica::Replica;
use crate::types::{LogId, NodeId};

/// How long removing a learner that did not catch up may take (one
/// membership entry committed by the voters as they are).
const REMOVE_LEARNER_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the wait for a learner ended without it caught up.
enum Waited {
    TimedOut { matched: Option<LogId> },
    Stopped,
    LostLeadership,
    Removed,
}

impl Replica {
    /// Adds node `id` at `addr` (see the module's documentation): a
    /// learner that must hold the leader's log as it stood when it was
    /// added within `within`, then a voter. If `stop` completes first (the
    /// server is shutting down) the wait ends with
    /// [`ClusterError::Stopped`]. On the leader only; elsewhere the error
    /// names the leader. Adding again a learner that is in the membership
    /// at the same address (an earlier add was cut short) goes on waiting
    /// for it.
    pub async fn add_node(
        &self,
        id: NodeId,
        addr: &str,
        within: Duration,
        stop: impl Future<Output = ()>,
    ) -> Result<(), ClusterError> {
        self.add_member(id, addr, within, stop, true).await
    }

    /// What this replica, if it leads its group, answers of it to
    /// [`crate::rpc::Request::Held`].
    pub(crate) fn held_range(&self) -> Option<crate::rpc::HeldRange> {
        if !self.is_leader() {
            return None;
        }
        let m = self.current_store().memory();
        Some(crate::rpc::HeldRange {
            group: self.group(),
            bytes: m.node_bytes + m.value_bytes,
            members: self.committed_members().map(|mut v| {
                v.sort_unstable();
                v
            }),
        })
    }

    /// On the leader, once its membership is committed: every member,
    /// voters and learners (a joint configuration's both halves). None
    /// elsewhere, or while a membership change is not committed: a node
    /// asking whether it may delete its replica must hear a settled
    /// answer.
    pub(crate) fn committed_members(&self) -> Option<Vec<NodeId>> {
        self.committed_membership().map(|(_, members)| members)
    }

    /// [`Replica::committed_members`], with the log id of the membership
    /// they are in (the default, below every other, for the initial one).
    pub(crate) fn committed_membership(&self) -> Option<(LogId, Vec<NodeId>)> {
        let metrics = self.inner.raft.metrics();
        let m = metrics.borrow();
        if m.current_leader != Some(self.inner.id) {
            return None;
        }
        let at = m.membership_config.log_id().unwrap_or_default();
        if at.index > self.commit_index() {
            return None;
        }
        let members = m
            .membership_config
            .membership()
            .nodes()
            .map(|(id, _)| *id)
            .collect();
        Some((at, members))
    }

    /// The log id of the membership this replica holds (None: none yet),
    /// what an answer to [`Request::MembersAt`] must not be older than.
    ///
    /// [`Request::MembersAt`]: crate::rpc::Request::MembersAt
    pub(crate) fn membership_log_id(&self) -> Option<LogId> {
        let metrics = self.inner.raft.metrics();
        let m = metrics.borrow();
        m.membership_config
            .membership()
            .nodes()
            .next()
            .map(|_| m.membership_config.log_id().unwrap_or_default())
    }

    /// [`Replica::add_node`] for a range's group (not group 0): a node
    /// that held a replica of the range before, and was moved away, may
    /// be given one again. The cluster's own rule (ids never reused) is
    /// about a node's identity, which group 0 keeps; a node coming back to
    /// a range comes back with its own state, or with none, catching up
    /// like any new replica in terms above any it voted in.
    pub(crate) async fn add_range_replica(
        &self,
        id: NodeId,
        addr: &str,
        within: Duration,
    ) -> Result<(), ClusterError> {
        self.add_member(id, addr, within, std::future::pending(), false)
            .await
    }

    async fn add_member(
        &self,
        id: NodeId,
        addr: &str,
        within: Duration,
        stop: impl Future<Output = ()>,
        refuse_retired: bool,
    ) -> Result<(), ClusterError> {
        self.leader_here()?;
        let raft = &self.inner.raft;
        let m = raft.metrics().borrow().clone();
        // Every former voter is known once the state machine has applied
        // the membership this leader works with.
        let at = m.membership_config.log_id().map_or(0, |l| l.index);
        if !self.wait_applied(at, Duration::from_secs(5)).await {
            return Err(ClusterError::Refused(
                "this leader has not applied its own membership yet; try again".into(),
            ));
        }
        let membership = m.membership_config.membership();
        let is_voter = membership.voter_ids().any(|v| v == id);
        let resume = match membership.get_node(&id) {
            Some(n) if is_voter => {
                return Err(ClusterError::Refused(format!(
                    "node {id} is already a voter of this cluster (at {})",
                    n.addr
                )));
            }
            Some(n) if same_addr(&n.addr, addr) => true,
            Some(n) => {
                return Err(ClusterError::Refused(format!(
                    "node {id} is already a learner of this cluster at {}; remove it first \
                     (`combkv cluster remove {id}`)",
                    n.addr
                )));
            }
            None => false,
        };
        if refuse_retired && self.inner.sm.ever_voters().contains(&id) {
            return Err(ClusterError::Refused(format!(
                "node id {id} belonged to a voter that was removed, and ids are never \
                 reused: start the new node with another --node-id"
            )));
        }
        let mut target = m.last_log_index.unwrap_or(0);
        if !resume {
            let added = raft
                .add_learner(id, BasicNode::new(addr), false)
                .await
                .map_err(write_error)?;
            target = target.max(added.log_id.index);
        }
        match self.wait_caught_up(id, target, within, stop).await {
            Ok(()) => {}
            Err(Waited::TimedOut { matched }) => {
                let reach = self
                    .inner
                    .health
                    .unreached(id)
                    .map_or_else(String::new, |why| format!("; sending to it fails: {why}"));
                let holds = matched.map_or_else(
                    || "none of it".to_string(),
                    |l| format!("it up to entry {}", l.index),
                );
                let left = self.remove_learner(id).await;
                return Err(ClusterError::Refused(format!(
                    "node {id} at {addr} did not catch up within {} s (the leader's log \
                     reaches entry {target}, the node holds {holds}{reach}); {left}",
                    within.as_secs_f64()
                )));
            }
            Err(Waited::Stopped) => {
                let left = self.remove_learner(id).await;
                tracing::warn!("adding node {id} cut short by shutdown; {left}");
                return Err(ClusterError::Stopped);
            }
            Err(Waited::LostLeadership) => {
                return Err(ClusterError::Refused(format!(
                    "this node stopped leading while node {id} caught up; node {id} stays a \
                     learner: send the add again to the leader to go on, or remove it"
                )));
            }
            Err(Waited::Removed) => {
                return Err(ClusterError::Refused(format!(
                    "node {id} was removed while it caught up"
                )));
            }
        }
        let change = ChangeMembers::AddVoterIds(BTreeSet::from([id]));
        raft.change_membership(change, false)
            .await
            .map_err(write_error)?;
        Ok(())
    }

    /// Waits until the leader's replication to `id` has matched `target`.
    async fn wait_caught_up(
        &self,
        id: NodeId,
        target: u64,
        within: Duration,
        stop: impl Future<Output = ()>,
    ) -> Result<(), Waited> {
        let deadline = Instant::now() + within;
        let mut rx = self.inner.raft.metrics();
        tokio::pin!(stop);
        loop {
            let matched = {
                let m = rx.borrow_and_update();
                if m.state != ServerState::Leader {
                    return Err(Waited::LostLeadership);
                }
                if m.membership_config.membership().get_node(&id).is_none() {
                    return Err(Waited::Removed);
                }
                m.replication
                    .as_ref()
                    .and_then(|r| r.get(&id).copied().flatten())
            };
            if matched.is_some_and(|l| l.index >= target) {
                return Ok(());
            }
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        return Err(Waited::Stopped);
                    }
                }
                () = tokio::time::sleep_until(deadline) => {
                    return Err(Waited::TimedOut { matched });
                }
                () = &mut stop => return Err(Waited::Stopped),
            }
        }
    }

    /// Takes learner `id` out again after an add that did not finish; says
    /// what the cluster is left with.
    async fn remove_learner(&self, id: NodeId) -> String {
        let change = ChangeMembers::RemoveNodes(BTreeSet::from([id]));
        let removed = tokio::time::timeout(
            REMOVE_LEARNER_TIMEOUT,
            self.inner.raft.change_membership(change, false),
        )
        .await;
        match removed {
            Ok(Ok(_)) => "it was removed again and the voters are unchanged: start it (or \
                          correct the address) and add it again"
                .to_string(),
            Ok(Err(e)) => format!(
                "removing it again failed ({}): it stays a learner and the voters are \
                 unchanged; remove it with `combkv cluster remove {id}`",
                write_error(e)
            ),
            Err(_) => format!(
                "removing it again took over {} s: it may stay a learner (the voters are \
                 unchanged); remove it with `combkv cluster remove {id}`",
                REMOVE_LEARNER_TIMEOUT.as_secs()
            ),
        }
    }

    /// Removes node `id` from the cluster: a voter loses its vote and
    /// leaves, a learner leaves. A voter's id is never given again. On the
    /// leader only; elsewhere the error names the leader.
    pub async fn remove_node(&self, id: NodeId) -> Result<(), ClusterError> {
        self.leader_here()?;
        let raft = &self.inner.raft;
        let (is_member, is_voter) = {
            let metrics = raft.metrics();
            let m = metrics.borrow();
            let membership = m.membership_config.membership();
            (
                membership.get_node(&id).is_some(),
                membership.voter_ids().any(|v| v == id),
            )
        };
        if !is_member {
            let why = if self.inner.sm.ever_voters().contains(&id) {
                format!("node {id} was removed already")
            } else {
                format!("node {id} is no member of this cluster")
            };
            return Err(ClusterError::Refused(why));
        }
        if is_voter {
            let change = ChangeMembers::RemoveVoters(BTreeSet::from([id]));
            raft.change_membership(change, false)
                .await
                .map_err(write_error)?;
        }
        // Removing a voter without `retain` takes the node out too; a
        // learner (or a voter kept as one) is taken out here.
        if raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_node(&id)
            .is_some()
        {
            let change = ChangeMembers::RemoveNodes(BTreeSet::from([id]));
            raft.change_membership(change, false)
                .await
                .map_err(write_error)?;
        }
        Ok(())
    }

    /// At startup, before the node forms or joins anything: whether its
    /// `--peers` agrees with the membership it stored (see
    /// `health::peers_disagreement`); the text names each difference. A
    /// node that holds no membership yet agrees with any.
    pub async fn check_peers(&self, peers: &[(NodeId, String)]) -> Result<(), String> {
        // openraft applied the committed log in `Raft::new`, so the state
        // machine already knows every voter the committed memberships had.
        let membership = self
            .inner
            .raft
            .with_raft_state(|st| st.membership_state.effective().membership().clone())
            .await
            .map_err(|e| e.to_string())?;
        if membership.nodes().next().is_none() {
            return Ok(());
        }
        match peers_disagreement(peers, &membership, &self.inner.sm.ever_voters()) {
            Some(d) => Err(d),
            None => Ok(()),
        }
    }

    /// Ok on the leader; elsewhere the error that names it.
    fn leader_here(&self) -> Result<(), ClusterError> {
        if self.is_leader() {
            return Ok(());
        }
        let (leader, addr) = match self.leader_addr() {
            Some((id, addr)) => (Some(id), Some(addr)),
            None => (None, None),
        };
        Err(ClusterError::NotLeader { leader, addr })
    }
}
