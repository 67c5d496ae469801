//! When a node stands for election.
//!
//! openraft 0.9 draws a node's election timeout once, when the node starts,
//! and waits that same time before every election it stands in. Two
//! followers whose draws fall within a vote's round trip of each other
//! (about one leader failure in thirty on a three-node cluster) both stand
//! at once, each votes for itself, neither wins, and both stand again the
//! same time apart: failover then took 3.6 s where it takes 1.3 to 1.7 s.
//! So combkv turns openraft's timer off and runs this one: a voter that
//! has heard from no leader for the leader's lease plus a random time in
//! the configured range stands; after an election that made no leader,
//! it stands again after a short time drawn anew, so a split vote is
//! broken in one more round of a few hundred milliseconds.
//!
//! "Heard from a leader" is what openraft counts too: an append accepted
//! from the current leader, or a vote this node granted (a node that just
//! voted gives the candidate its round before standing itself).

use std::sync::Arc;
use std::time::Duration;

use openraft::ServerState;
use tokio::time::Instant;

use crate::replica::{Inner, Replica};

/// After an election that made no leader, a voter stands again after a
/// random time in this range (ms): long enough for a vote's round trip and
/// fsync, short enough that a split vote costs little.
const RETRY_MS: (u64, u64) = (100, 300);

fn draw((min, max): (u64, u64)) -> Duration {
    Duration::from_millis(rand::random_range(min..max.max(min + 1)))
}

impl Replica {
    /// Takes elections over from openraft's timer (see the module's
    /// documentation). `timeouts` is the configured range (ms); the leader's
    /// lease is its top, as openraft makes it.
    pub(crate) fn spawn_election_timer(&self, timeouts: (u64, u64)) {
        self.inner.raft.runtime_config().elect(false);
        let lease = Duration::from_millis(timeouts.1);
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            // The wait after the last contact; drawn anew after every
            // election this node stands in.
            let mut wait = lease + draw(timeouts);
            loop {
                let Some(inner) = weak.upgrade() else { return };
                let now = Instant::now();
                let next = match stand_now(&inner, now, wait) {
                    Stand::Never => return,
                    Stand::NotNow(until) => until,
                    Stand::Yes => {
                        inner.contact.heard();
                        if inner.raft.trigger().elect().await.is_err() {
                            return;
                        }
                        // This election's vote is not committed until it
                        // wins; if it does not, stand again soon.
                        wait = draw(RETRY_MS);
                        now + wait
                    }
                };
                drop(inner);
                tokio::time::sleep_until(next).await;
                // A leader was heard since a failed election: the next
                // election waits out a lease again.
                if let Some(inner) = weak.upgrade()
                    && inner.raft.metrics().borrow().vote.is_committed()
                    && wait < lease
                {
                    wait = lease + draw(timeouts);
                }
            }
        });
    }
}

enum Stand {
    /// The node stopped.
    Never,
    /// Not before this time (looked at again then).
    NotNow(Instant),
    Yes,
}

fn stand_now(inner: &Inner, now: Instant, wait: Duration) -> Stand {
    let metrics = inner.raft.metrics();
    let m = metrics.borrow();
    match m.state {
        ServerState::Shutdown => return Stand::Never,
        // A leader keeps its lease fresh itself; a learner never stands.
        ServerState::Leader | ServerState::Learner => {
            return Stand::NotNow(now + Duration::from_millis(100));
        }
        ServerState::Follower | ServerState::Candidate => {}
    }
    let membership = m.membership_config.membership();
    let (mut voters, mut me) = (0, false);
    for id in membership.voter_ids() {
        voters += 1;
        me |= id == inner.id;
    }
    if !me {
        return Stand::NotNow(now + Duration::from_millis(100));
    }
    // The only voter has no one to wait for (openraft stands at once too).
    if voters == 1 {
        return Stand::Yes;
    }
    // Never inside the lease of a leader whose append arrived here: a vote
    // for itself would skip openraft's lease check (`lease`). The metrics
    // the timer looks at may not show that append yet.
    let lease = crate::lease::length(&inner.raft);
    let due = (inner.contact.last() + wait).max(inner.contact.may_stand_from(lease));
    if now >= due {
        Stand::Yes
    } else {
        Stand::NotNow(due)
    }
}
