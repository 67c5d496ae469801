//! Why a node cannot join or elect, in words an operator can act on.
//!
//! A node without a leader serves no client (`CLUSTERDOWN` after 10 s), and
//! openraft's own log says only that a replication or vote failed, over
//! and over. So the network notes, per peer, what happened to the last
//! request sent to it ([`Health::answered`], [`Health::failed`],
//! [`Health::refused_vote`]), and a watch ([`Replica::watch`]) that finds
//! the node without a leader for [`NO_LEADER_REPORT`], or holding a
//! membership its `--peers` contradicts, puts the reason together: its
//! term, the peers it cannot reach and why, the peers that refused it
//! their vote and what they stand at. The reason is logged (a warning when
//! it appears, again every [`REPEAT_WARNING`] while it lasts) and is
//! [`crate::Status::problem`] (`cluster_problem` in `INFO replication`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use openraft::raft::VoteResponse;
use openraft::{BasicNode, Membership, ServerState};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::node::Replica;
use crate::types::NodeId;

/// A node without a leader this long says why. An election takes a lease
/// and a timeout (1.3 to 1.6 s by default) and a split vote a few hundred
/// milliseconds more: 5 s without a leader is no election in progress but
/// a cluster that cannot make one.
pub const NO_LEADER_REPORT: Duration = Duration::from_secs(5);
/// While a problem lasts its warning is logged again this often (its
/// reason may have changed; the log must not fill with one line a second).
const REPEAT_WARNING: Duration = Duration::from_secs(30);
/// How often the watch looks.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// What happened to the requests this node sent to one peer.
#[derive(Debug, Clone, Default)]
struct Reach {
    /// When a request to it was last answered.
    answered: Option<Instant>,
    /// The last failure to reach it, and when.
    failed: Option<(Instant, String)>,
    /// The last vote it refused this node: when, and what it stands at.
    refused: Option<(Instant, String)>,
}

/// Per peer, how this node's requests fared; and the problem the watch
/// found, if any.
#[derive(Debug, Default)]
pub(crate) struct Health {
    peers: Mutex<BTreeMap<NodeId, Reach>>,
    problem: Mutex<Option<String>>,
}

impl Health {
    /// A request to `peer` was answered.
    pub(crate) fn answered(&self, peer: NodeId) {
        self.peers.lock().entry(peer).or_default().answered = Some(Instant::now());
    }

    /// A request to `peer` did not reach it, or got no answer.
    pub(crate) fn failed(&self, peer: NodeId, why: &dyn std::fmt::Display) {
        self.peers.lock().entry(peer).or_default().failed = Some((Instant::now(), why.to_string()));
    }

    /// `peer` answered a vote request: granted, or refused and why.
    pub(crate) fn voted(&self, peer: NodeId, resp: &VoteResponse<NodeId>) {
        let mut peers = self.peers.lock();
        let reach = peers.entry(peer).or_default();
        let now = Instant::now();
        reach.answered = Some(now);
        reach.refused = (!resp.vote_granted).then(|| {
            let last = resp
                .last_log_id
                .map_or_else(|| "an empty log".to_string(), |l| format!("log at {l}"));
            (now, format!("its vote is {}, {last}", resp.vote))
        });
    }

    /// Whether a request to `peer` was answered within `window`.
    fn answered_within(&self, peer: NodeId, window: Duration) -> bool {
        self.peers
            .lock()
            .get(&peer)
            .and_then(|r| r.answered)
            .is_some_and(|at| at.elapsed() <= window)
    }

    /// Why `peer` was not reached, if the last request to it failed.
    pub(crate) fn unreached(&self, peer: NodeId) -> Option<String> {
        let peers = self.peers.lock();
        let reach = peers.get(&peer)?;
        let (at, why) = reach.failed.as_ref()?;
        (reach.answered < Some(*at)).then(|| why.clone())
    }

    /// One line per other voter: whether this node reaches it, and what
    /// it answered to this node's last vote request.
    fn describe(&self, me: NodeId, voters: &BTreeMap<NodeId, String>) -> Vec<String> {
        let peers = self.peers.lock();
        voters
            .iter()
            .filter(|(id, _)| **id != me)
            .map(|(id, addr)| {
                let reach = peers.get(id).cloned().unwrap_or_default();
                match (&reach.failed, &reach.refused) {
                    (Some((at, why)), _) if reach.answered < Some(*at) => {
                        format!("node {id} at {addr} is unreachable ({why})")
                    }
                    (_, Some((_, stands))) => {
                        format!("node {id} at {addr} refused this node its vote ({stands})")
                    }
                    _ if reach.answered.is_some() => format!("node {id} at {addr} answers"),
                    _ => format!("node {id} at {addr} was not asked yet"),
                }
            })
            .collect()
    }
}

/// Where `peers` (a node's `--peers`) contradicts the membership its
/// cluster stored: a peer the membership holds at another address, or a
/// peer that is no member and never was a voter (one removed since is no
/// contradiction: `--peers` names the first voters). Members that
/// `--peers` leaves out were added since. None when they agree.
pub(crate) fn peers_disagreement(
    peers: &[(NodeId, String)],
    membership: &Membership<NodeId, BasicNode>,
    ever_voters: &BTreeSet<NodeId>,
) -> Option<String> {
    let mut diffs = Vec::new();
    for (id, addr) in peers {
        match membership.get_node(id) {
            Some(n) if !same_addr(&n.addr, addr) => diffs.push(format!(
                "--peers has node {id} at {addr}, the cluster has it at {}",
                n.addr
            )),
            Some(_) => {}
            None if ever_voters.contains(id) => {}
            None => diffs.push(format!(
                "--peers names node {id} at {addr}, which is no member of the cluster"
            )),
        }
    }
    if diffs.is_empty() {
        return None;
    }
    let members: Vec<String> = membership
        .nodes()
        .map(|(id, n)| format!("{id}={}", n.addr))
        .collect();
    Some(format!(
        "this node's --peers disagrees with the membership its cluster stored ({}): {}",
        members.join(","),
        diffs.join("; ")
    ))
}

/// Two Raft addresses alike: as socket addresses where both parse (so
/// that `127.0.0.1:07001` is `127.0.0.1:7001`), else as text.
pub(crate) fn same_addr(a: &str, b: &str) -> bool {
    match (
        a.parse::<std::net::SocketAddr>(),
        b.parse::<std::net::SocketAddr>(),
    ) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

impl Replica {
    /// Watches this node for a problem that keeps it from joining or
    /// electing (see the module's documentation), on the current runtime,
    /// until the node stops. `peers` is its `--peers` (empty without).
    pub fn watch(&self, peers: Vec<(NodeId, String)>) {
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let mut leaderless_since: Option<Instant> = None;
            let mut warned: Option<Instant> = None;
            loop {
                tokio::time::sleep(WATCH_EVERY).await;
                let Some(inner) = weak.upgrade() else { return };
                let replica = Replica { inner };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn membership(nodes: &[(NodeId, &str)]) -> Membership<NodeId, BasicNode> {
        let map: BTreeMap<NodeId, BasicNode> = nodes
            .iter()
            .map(|(id, a)| (*id, BasicNode::new(*a)))
            .collect();
        let voters: BTreeSet<NodeId> = map.keys().copied().collect();
        Membership::new(vec![voters], map)
    }

    fn peers(list: &[(NodeId, &str)]) -> Vec<(NodeId, String)> {
        list.iter().map(|(id, a)| (*id, a.to_string())).collect()
    }

    #[test]
    fn peers_that_match_or_name_removed_voters_agree() {
        let m = membership(&[
            (1, "127.0.0.1:7001"),
            (2, "127.0.0.1:7002"),
            (4, "10.0.0.4:1"),
        ]);
        let p = peers(&[
            (1, "127.0.0.1:7001"),
            (2, "127.0.0.1:7002"),
            (3, "127.0.0.1:7003"),
        ]);
        // Node 3 was a voter and was removed; node 4 was added since.
        assert_eq!(
            peers_disagreement(&p, &m, &BTreeSet::from([1, 2, 3, 4])),
            None
        );
    }

    #[test]
    fn another_address_or_an_unknown_id_is_named() {
        let m = membership(&[(1, "127.0.0.1:7001"), (2, "127.0.0.1:7002")]);
        let p = peers(&[
            (1, "127.0.0.1:7001"),
            (2, "127.0.0.1:7009"),
            (5, "127.0.0.1:7005"),
        ]);
        let d = peers_disagreement(&p, &m, &BTreeSet::from([1, 2])).unwrap();
        assert!(
            d.contains(
                "--peers has node 2 at 127.0.0.1:7009, the cluster has it at 127.0.0.1:7002"
            ),
            "{d}"
        );
        assert!(
            d.contains("--peers names node 5 at 127.0.0.1:7005, which is no member"),
            "{d}"
        );
        assert!(d.contains("(1=127.0.0.1:7001,2=127.0.0.1:7002)"), "{d}");
    }

    #[test]
    fn a_refused_vote_and_an_unreachable_peer_are_told_apart() {
        let h = Health::default();
        h.failed(2, &"connection refused");
        h.voted(
            3,
            &VoteResponse::new(
                openraft::Vote::new(7, 3),
                Some(openraft::LogId::new(
                    openraft::CommittedLeaderId::new(6, 3),
                    40,
                )),
                false,
            ),
        );
        let voters = BTreeMap::from([
            (1, "a:1".to_string()),
            (2, "b:2".to_string()),
            (3, "c:3".to_string()),
        ]);
        let lines = h.describe(1, &voters);
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[0],
            "node 2 at b:2 is unreachable (connection refused)"
        );
        assert!(
            lines[1].starts_with("node 3 at c:3 refused this node its vote (its vote is T7-N3"),
            "{}",
            lines[1]
        );
        assert!(lines[1].contains("log at T6-N3-40"), "{}", lines[1]);
        h.answered(2);
        assert_eq!(h.unreached(2), None);
        assert_eq!(h.describe(1, &voters)[0], "node 2 at b:2 answers");
    }
}
