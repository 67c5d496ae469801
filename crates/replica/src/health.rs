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
use std::time::Duration;

use openraft::raft::VoteResponse;
use openraft::{BasicNode, Membership};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::types::NodeId;

/// A node without a leader this long says why. An election takes a lease
/// and a timeout (1.3 to 1.6 s by default) and a split vote a few hundred
/// milliseconds more: 5 s without a leader is no election in progress but
/// a cluster that cannot make one.
pub const NO_LEADER_REPORT: Duration = Duration::from_secs(5);

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
    pub(crate) problem: Mutex<Option<String>>,
    /// Set, with why, while the cluster's leader says this node is no
    /// member of its committed membership (`Replica::ask_membership`).
    pub(crate) removed: Mutex<Option<String>>,
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
    pub(crate) fn answered_within(&self, peer: NodeId, window: Duration) -> bool {
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
    pub(crate) fn describe(&self, me: NodeId, voters: &BTreeMap<NodeId, String>) -> Vec<String> {
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
