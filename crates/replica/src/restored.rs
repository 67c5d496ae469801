//! Linearizable reads from a leader that restarted into its old leadership.
//!
//! A leader that restarts before anyone else is elected takes up its old
//! leadership from its saved vote (openraft's "a leader survives a
//! restart"; upstream, databendlabs/openraft#1511), in the same term and
//! without a new blank entry. openraft's read index is then the larger of
//! the saved commit point and the first entry of that term. Both may be
//! older than writes this node acknowledged before the crash: the commit
//! point is saved lazily (a lagging one only costs re-applying more of the
//! log), and the term may have begun long before. A read served at that
//! index misses acknowledged writes until the next entry commits.
//!
//! So while such a leadership lasts, a read index also covers the whole
//! log as it stood at the start. That is safe to wait for: a leader never
//! cuts its own log, so it commits every entry of it, and a blank entry
//! proposed at once makes it commit them without waiting for a client's
//! write (an entry of an earlier term commits only under one of the
//! current term, and the log may hold none yet if the node died between
//! saving its vote and its first entry).

use std::sync::atomic::Ordering;

use openraft::error::CheckIsLeaderError;
use openraft::{BasicNode, ServerState};

use crate::replica::Replica;
use crate::rpc::RaftResult;
use crate::types::{Batch, LogId, NodeId};

impl Replica {
    /// This node's read index as the leader: openraft's, confirmed with a
    /// quorum, raised to the log at the start while a restored leadership
    /// lasts. Errs if this node is not the leader.
    pub(crate) async fn read_index_here(
        &self,
    ) -> RaftResult<Option<LogId>, CheckIsLeaderError<NodeId, BasicNode>> {
        // Judged before the quorum check: a vote only grows, so if the
        // restored one is gone by then, the check confirms a later
        // leadership, whose own blank entry openraft's index covers.
        let floor = self
            .inner
            .restored
            .filter(|r| self.inner.raft.metrics().borrow().vote == r.vote)
            .map(|r| r.last);
        let lease = &self.inner.lease;
        if let Some(read) = self.lease_read_index() {
            lease.leased.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(read).max(floor));
        }
        let (read, _applied) = self.inner.raft.get_read_log_id().await?;
        lease.rounds.fetch_add(1, Ordering::Relaxed);
        Ok(read.max(floor))
    }

    /// The read index without a quorum round, while this leader holds its
    /// lease (`lease`): its last log entry, which follows the blank entry
    /// of its term, so waiting for it applies every entry any leader
    /// committed. None if this node does not lead, or its lease has
    /// lapsed.
    fn lease_read_index(&self) -> Option<LogId> {
        let metrics = self.inner.raft.metrics();
        let m = metrics.borrow();
        if m.state != ServerState::Leader || m.current_leader != Some(self.inner.id) {
            return None;
        }
        let configs = m.membership_config.membership().get_joint_config();
        let lease = crate::lease::length(&self.inner.raft);
        let now = tokio::time::Instant::now();
        if !self
            .inner
            .lease
            .holds(self.inner.id, &m.vote, configs, lease, now)
        {
            return None;
        }
        // The metrics are published once a pass of openraft's loop: their
        // last index may be older than a write committed, applied and
        // acknowledged in the same pass. The log's commit point is saved
        // (in memory) before an entry applies, so it covers every such
        // write.
        let committed = crate::replica::index_of(self.inner.log.committed());
        let index = m.last_log_index?.max(committed);
        let leader = openraft::CommittedLeaderId::new(m.vote.leader_id.term, self.inner.id);
        Some(LogId::new(leader, index))
    }

    /// Once openraft has taken up the restored leadership, proposes a blank
    /// batch (no ops), so that the log at the start commits without a
    /// client's write.
    pub(crate) fn spawn_restored_blank(&self) {
        let Some(restored) = self.inner.restored else {
            return;
        };
        let mut metrics = self.inner.raft.metrics();
        let weak = std::sync::Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            loop {
                {
                    let m = metrics.borrow_and_update();
                    if m.vote != restored.vote {
                        // Another leadership began: its blank entry does it.
                        return;
                    }
                    if m.state == ServerState::Leader {
                        break;
                    }
                }
                if metrics.changed().await.is_err() {
                    return;
                }
            }
            let Some(inner) = weak.upgrade() else { return };
            let me = Replica { inner };
            let mut ops = Vec::new();
            crate::codec::encode_ops(&[], &mut ops);
            let batch = Batch {
                now_ms: me.clock_ms(),
                ops,
            };
            if let Err(e) = me.inner.group.propose(batch).await {
                // A lost leadership's successor commits its own blank entry.
                tracing::info!("the blank entry of a restored leadership: {e:?}");
            }
        });
    }
}
