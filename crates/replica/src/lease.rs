//! Linearizable reads under the leader's lease, without a quorum round.
//!
//! A read index costs a round of heartbeats to a quorum (openraft's
//! `get_read_log_id`), for each batch of reads. Raft's leader lease makes
//! most of them unneeded: a follower that accepted an append from the
//! leader refuses every vote for the lease after it (openraft's
//! `leader_lease`, the election timeout's top; this crate's election timer
//! stands no sooner either). So once a quorum of each of the group's
//! configurations has accepted an append sent at time `t`, no other
//! leader can be elected before `t + lease`: any quorum that elects one
//! holds a node that accepted it, and refuses until then. Until a margin
//! before that, this leader's log holds every entry any leader has
//! committed, and a read at its last log index (which holds the blank
//! entry of its term, so every earlier term's entries apply first) is
//! linearizable as a read index is.
//!
//! What it rests on, and what keeps each true:
//!
//! - A send time recorded before the append leaves, and counted only for
//!   an append the follower accepted (success) under the vote it was sent
//!   with (`acked`).
//! - Clocks that run at the same rate on every node, within the margin
//!   (an eighth of the lease): on one host they are the same clock.
//! - A node that restarts has forgotten when it last accepted an append:
//!   openraft takes the committed vote it finds saved as renewed at the
//!   start, so it grants no vote for a lease after it (otherwise a
//!   follower that accepted the leader's append and restarted at once
//!   could help elect another inside the lease; `tests/lease_sim.rs`).
//! - A leader whose lease has passed since it was elected takes votes as
//!   any node does (openraft times the lease on a leader from its own
//!   vote, not from its followers' answers): granting one ends its lease
//!   here before the answer leaves (`voted`), so a leader elected with its
//!   vote never overlaps a lease read of it.
//! - A node's vote for itself skips openraft's lease check, so a node
//!   stands only a lease after the last append that arrived at it, timed
//!   as it arrives, before openraft takes it (`Contact::may_stand_from`):
//!   its election timer waits that long too (the metrics it reads may not
//!   show the append yet), and a leader's request to stand (a hand-over,
//!   which withholds every append for a lease first) is refused inside it,
//!   as when it arrives late, after its sender led again or was replaced.
//! - The read index is at least the log's commit point, which openraft
//!   saves before an entry applies: the metrics, published once a pass of
//!   its loop, may not show a write committed, applied and acknowledged in
//!   the same pass, and a follower reading at their last index would miss
//!   it.
//! - Every node has the same election timeout (the lease is the leader's
//!   own, the refusals each follower's): the server does not let it be set.
//! - The clock is the monotonic one, which stops while a machine is
//!   suspended: a leader whose host resumes from a suspension could serve
//!   from a lease that has lapsed for the others. Suspend a node's machine
//!   only with the node stopped.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use std::sync::atomic::AtomicU64;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::types::{NodeId, Vote};

/// The lease: the election timeout's top, which openraft makes its
/// followers' `leader_lease` (every node has the same one).
pub(crate) fn length(raft: &openraft::Raft<crate::types::TypeConfig>) -> Duration {
    Duration::from_millis(raft.config().election_timeout_max)
}

/// When each voter last accepted an append sent under one vote, and how
/// this node's read indexes as the leader were confirmed.
#[derive(Debug, Default)]
pub(crate) struct Lease {
    acks: Mutex<Acks>,
    /// Read indexes served under the lease, and with a quorum round.
    pub(crate) leased: AtomicU64,
    pub(crate) rounds: AtomicU64,
}

#[derive(Debug, Default)]
struct Acks {
    /// The vote the sends below were made under; a newer vote (this node
    /// leading again later, or voting for another) starts afresh.
    vote: Option<Vote>,
    /// Per follower, the send time of the latest append it accepted.
    sent: BTreeMap<NodeId, Instant>,
}

impl Lease {
    /// `target` accepted an append this node sent at `sent` as the leader
    /// of `vote`.
    pub(crate) fn acked(&self, target: NodeId, vote: &Vote, sent: Instant) {
        let mut acks = self.acks.lock();
        match acks.vote.as_ref().map(|v| vote.partial_cmp(v)) {
            Some(Some(std::cmp::Ordering::Equal)) => {}
            // A newer leadership of this node, or its first.
            None | Some(Some(std::cmp::Ordering::Greater)) => {
                acks.vote = Some(*vote);
                acks.sent.clear();
            }
            // A late answer to an append of an older leadership.
            _ => return,
        }
        let at = acks.sent.entry(target).or_insert(sent);
        *at = (*at).max(sent);
    }

    /// This node took `vote` (granted it to a candidate, or stands): no
    /// lease of an older vote holds from now on.
    pub(crate) fn voted(&self, vote: &Vote) {
        let mut acks = self.acks.lock();
        if acks.vote.is_none_or(|v| *vote > v) {
            acks.vote = Some(*vote);
            acks.sent.clear();
        }
    }

    /// Whether this node (`me`), leading as `vote`, holds its lease at
    /// `now`: in each of `configs` (one, or two during a change of
    /// membership), a majority of voters has accepted an append sent less
    /// than the lease, less its margin, ago (this node counts as one).
    pub(crate) fn holds(
        &self,
        me: NodeId,
        vote: &Vote,
        configs: &[BTreeSet<NodeId>],
        lease: Duration,
        now: Instant,
    ) -> bool {
        let acks = self.acks.lock();
        if acks.vote.as_ref() != Some(vote) || configs.is_empty() {
            return false;
        }
        let usable = lease.saturating_sub(lease / 8);
        configs.iter().all(|voters| {
            let fresh = voters
                .iter()
                .filter(|&&v| v == me || acks.sent.get(&v).is_some_and(|&t| t + usable > now))
                .count();
            fresh > voters.len() / 2
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vote(term: u64, node: NodeId) -> Vote {
        Vote::new_committed(term, node)
    }

    #[test]
    fn a_majority_of_fresh_acks_in_every_config_holds_the_lease() {
        let lease = Duration::from_millis(800);
        let usable = lease - lease / 8;
        let l = Lease::default();
        let v = vote(2, 1);
        let t0 = Instant::now();
        let three: Vec<BTreeSet<NodeId>> = vec![[1, 2, 3].into()];
        // Nothing acknowledged yet: only this node.
        assert!(!l.holds(1, &v, &three, lease, t0));
        l.acked(2, &v, t0);
        assert!(l.holds(1, &v, &three, lease, t0));
        assert!(l.holds(1, &v, &three, lease, t0 + usable - Duration::from_millis(1)));
        assert!(!l.holds(1, &v, &three, lease, t0 + usable));
        // Another leader's vote, or this node's under another term, holds
        // nothing.
        assert!(!l.holds(1, &vote(3, 1), &three, lease, t0));
        // A change of membership: a majority of each config.
        let joint: Vec<BTreeSet<NodeId>> = vec![[1, 2, 3].into(), [1, 4, 5].into()];
        assert!(!l.holds(1, &v, &joint, lease, t0));
        l.acked(4, &v, t0);
        assert!(l.holds(1, &v, &joint, lease, t0));
        // An older send does not move an ack back.
        l.acked(2, &v, t0 - Duration::from_secs(5));
        assert!(l.holds(1, &v, &three, lease, t0));
    }

    #[test]
    fn a_vote_granted_or_a_newer_leadership_ends_the_lease() {
        let lease = Duration::from_millis(800);
        let l = Lease::default();
        let v = vote(2, 1);
        let t0 = Instant::now();
        let three: Vec<BTreeSet<NodeId>> = vec![[1, 2, 3].into()];
        l.acked(2, &v, t0);
        assert!(l.holds(1, &v, &three, lease, t0));
        // This node grants a vote to node 3's candidacy in term 3.
        l.voted(&Vote::new(3, 3));
        assert!(!l.holds(1, &v, &three, lease, t0));
        // A late answer to an append of term 2 brings nothing back.
        l.acked(2, &v, t0);
        assert!(!l.holds(1, &v, &three, lease, t0));
        // Leading again in term 4: its own acks count.
        let v4 = vote(4, 1);
        l.acked(3, &v4, t0);
        assert!(l.holds(1, &v4, &three, lease, t0));
        // An older vote told later changes nothing.
        l.voted(&Vote::new(3, 2));
        assert!(l.holds(1, &v4, &three, lease, t0));
    }
}
