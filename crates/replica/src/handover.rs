//! Handing a group's leadership to another of its voters, so that the
//! leaders of many ranges spread over the nodes (`host::leaders` decides
//! which).
//!
//! openraft 0.9 has no leader transfer (0.10's is not released), so the
//! leader steps aside: it stops proposing, waits until the chosen voter
//! holds its whole log, then withholds its appends and heartbeats for one
//! leader lease, so that no follower refuses a vote for the leader it still
//! hears from, and asks the chosen voter to stand. The chosen voter stands
//! at once; the others' election timers wait a lease plus a random time, so
//! it stands first, with the longest log. Withholding messages and calling
//! an election are both things Raft allows any node at any time: safety
//! rests on Raft's own rules, and a hand-over costs the group about a lease
//! (0.8 s by default) in which its writes and reads wait, then go on at the
//! new leader. Should the chosen voter not win, an ordinary election follows.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::ClusterError;
use crate::hold::{FREE, SILENT};
use crate::replica::Replica;
use crate::rpc::{Request, Response};
use crate::types::NodeId;

/// How long the leader waits for the chosen voter to hold its whole log
/// before it goes silent anyway (the voter then may not win; an ordinary
/// election follows).
const CATCH_UP: Duration = Duration::from_millis(500);
/// How long after the chosen voter is asked to stand the leader waits to
/// see another leader before it speaks again.
const ELECTED: Duration = Duration::from_secs(2);

impl Replica {
    /// Hands this group's leadership to voter `to` (see the module's
    /// documentation); returns once another node leads, or the attempt is
    /// given up (this node then leads on, or an election settles it).
    /// Refused unless this node leads and `to` is another voter.
    pub async fn hand_over(&self, to: NodeId) -> Result<(), ClusterError> {
        let inner = &self.inner;
        let addr = {
            let metrics = inner.raft.metrics();
            let m = metrics.borrow();
            let membership = m.membership_config.membership();
            if m.current_leader != Some(inner.id) {
                return Err(ClusterError::Refused("this node does not lead".into()));
            }
            if to == inner.id || !membership.voter_ids().any(|v| v == to) {
                return Err(ClusterError::Refused(format!(
                    "node {to} is no other voter"
                )));
            }
            membership.get_node(&to).map(|n| n.addr.clone())
        };
        let Some(addr) = addr else {
            return Err(ClusterError::Refused(format!("node {to} has no address")));
        };
        let lease = crate::lease::length(&inner.raft);
        if !inner.hold.begin() {
            return Err(ClusterError::Refused("a hand-over is under way".into()));
        }
        let deadline = Instant::now() + CATCH_UP;
        while Instant::now() < deadline && !self.holds_whole_log(to) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        inner.hold.set(SILENT);
        tokio::time::sleep(lease + Duration::from_millis(100)).await;
        // This group's transport names the group itself.
        let asked = inner.transport.call(to, &addr, Request::Stand, lease).await;
        if !matches!(asked, Ok(Response::Stood(true))) {
            tracing::debug!("group {}: node {to} did not stand: {asked:?}", self.group());
        }
        let deadline = Instant::now() + ELECTED;
        while Instant::now() < deadline && self.is_leader() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        inner.hold.set(FREE);
        inner.group.wake();
        if self.is_leader() {
            tracing::info!(
                "group {}: node {to} did not take the lead; this node leads on",
                self.group()
            );
        }
        Ok(())
    }

    /// Whether voter `to` has matched this leader's last log entry.
    fn holds_whole_log(&self, to: NodeId) -> bool {
        let metrics = self.inner.raft.metrics();
        let m = metrics.borrow();
        let last = m.last_log_index;
        m.replication
            .as_ref()
            .and_then(|r| r.get(&to))
            .is_some_and(|matched| matched.map(|l| l.index) == last)
    }

    /// Stands for election at once, as the leader handing over asked:
    /// false if this node is no voter, or took an append less than a lease
    /// ago (a Stand that arrived late, after its sender led again or was
    /// replaced: standing would break that leader's lease, `lease`).
    pub(crate) async fn stand(&self) -> bool {
        if !self.is_voter() || self.is_leader() {
            return false;
        }
        let lease = crate::lease::length(&self.inner.raft);
        if tokio::time::Instant::now() < self.inner.contact.may_stand_from(lease) {
            tracing::info!("asked to stand for election inside a leader's lease: refused");
            return false;
        }
        self.inner.contact.heard();
        self.inner.raft.trigger().elect().await.is_ok()
    }
}
