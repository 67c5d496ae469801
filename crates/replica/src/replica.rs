//! The running node as every part of it sees it: its Raft instance, state
//! machine, log and transport, the state its parts keep (the read-index
//! queue, the group-commit queue, the election timer's contact, a restored
//! leadership, the peers' health), and what they ask of it (the leader,
//! what is applied). Its behaviours build on this: serving clients
//! (`client`), elections (`election`), the health watch (`watch`),
//! administration (`membership`), and starting and serving peers (`node`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use combkv::{DurationHistogram, HistogramSnapshot, Store};
use openraft::Raft;
use openraft::storage::RaftLogStorage;
use parking_lot::Mutex;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use crate::error::{ClusterError, StartError};
use crate::group_commit::GroupCommit;
use crate::health::Health;
use crate::log_store::LogStore;
use crate::network::Transport;
use crate::network::tls::PeerGuard;
use crate::state_machine::{StateMachine, StoreCell};
use crate::types::{LogId, NodeId, TypeConfig, Vote};

/// A running node.
#[derive(Clone)]
pub struct Replica {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("id", &self.inner.id)
            .finish()
    }
}

pub(crate) struct Inner {
    pub(crate) id: NodeId,
    pub(crate) raft: Raft<TypeConfig>,
    pub(crate) sm: StateMachine,
    /// A handle on the log (it knows the commit point).
    pub(crate) log: LogStore,
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) reads: ReadBatcher,
    /// Reads across ranges waiting for this range's read floor (`read_at`).
    pub(crate) floors: FloorBatcher,
    pub(crate) group: Arc<GroupCommit>,
    /// Bounds the batches this node has in flight (its own and forwarded).
    pub(crate) in_flight: tokio::sync::Semaphore,
    /// The clock of the newest batch this node proposed.
    pub(crate) last_proposed_ms: std::sync::atomic::AtomicU64,
    /// How long each write this node was handed took to be answered.
    pub(crate) proposals: DurationHistogram,
    /// Set when this node restarted as the leader it was (see
    /// [`RestoredLeadership`]).
    pub(crate) restored: Option<RestoredLeadership>,
    /// When this node last heard from a leader (its election timer).
    pub(crate) contact: Contact,
    /// How requests to each peer fared, and the problem the watch found.
    pub(crate) health: Arc<Health>,
    /// The Raft port's TLS and the count of what it refused.
    pub(crate) guard: Arc<PeerGuard>,
    /// Set while this leader hands its group over (`handover`).
    pub(crate) hold: Arc<crate::hold::Hold>,
    /// When followers last accepted this leader's appends (`lease`).
    pub(crate) lease: Arc<crate::lease::Lease>,
    /// Snapshots streaming to followers or from the leader.
    pub(crate) transfers: Arc<crate::transfers::Transfers>,
}

/// Batches a node proposes or forwards at once; more wait for a place.
pub(crate) const MAX_IN_FLIGHT: usize = 1024;

impl Replica {
    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.inner.id
    }

    /// The store this node serves from (replaced whole when a snapshot is
    /// installed).
    pub fn store(&self) -> &StoreCell {
        self.inner.sm.store()
    }

    /// The current store, for one request.
    pub fn current_store(&self) -> Arc<Store> {
        self.inner.sm.store().get()
    }

    /// A digest of this node's state and the log id it stands at (tests
    /// compare replicas with it).
    pub fn digest(&self) -> std::io::Result<(Option<(u64, u64)>, u64)> {
        let (at, d) = self.inner.sm.digest()?;
        Ok((at.map(|l| (l.leader_id.term, l.index)), d))
    }

    /// Waits until this node has applied at least `index`.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> bool {
        let mut rx = self.inner.sm.applied();
        tokio::time::timeout(timeout, async {
            loop {
                if rx.borrow_and_update().is_some_and(|l| l.index >= index) {
                    return;
                }
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        })
        .await
        .is_ok()
    }

    /// The durations of the writes ([`Replica::write`]) this node was
    /// handed and answered with their results, from the call to the
    /// answer: queueing, the quorum round, applying, and for a forwarded
    /// write the leader's answer and this node's apply.
    pub fn proposal_durations(&self) -> HistogramSnapshot {
        self.inner.proposals.snapshot()
    }

    /// How long each fsync of this node's Raft log took.
    pub fn log_fsync_durations(&self) -> HistogramSnapshot {
        self.inner.log.fsync_durations()
    }

    /// Whether `other` is this very replica (not another started since
    /// for the same group, or one of another group).
    pub fn is_same(&self, other: &Replica) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The group this replica is of (its range's id).
    pub fn group(&self) -> crate::types::GroupId {
        self.inner.sm.group()
    }

    /// Whether this node is the voter that stands first in a new group's
    /// first election (`host::stand_first`): the group's id picks one of
    /// its voters, in id order, so that the ranges splits make start with
    /// their leaders spread over the nodes as the balancer would have
    /// them (each hand-over it makes stalls a range's writes a lease).
    pub(crate) fn stands_first(&self) -> bool {
        let metrics = self.inner.raft.metrics();
        let m = metrics.borrow();
        let mut voters: Vec<_> = m.membership_config.membership().voter_ids().collect();
        voters.sort_unstable();
        !voters.is_empty() && voters[(self.group() % voters.len() as u64) as usize] == self.inner.id
    }

    /// Whether this node votes in its group's membership (as far as it
    /// knows): a learner still catching up does not, and serves no read.
    pub fn is_voter(&self) -> bool {
        let metrics = self.inner.raft.metrics();
        let m = metrics.borrow();
        m.membership_config
            .membership()
            .voter_ids()
            .any(|v| v == self.inner.id)
    }

    /// Counts `n` reads this replica served, `key` one of them, toward its
    /// range's load (splits by load).
    pub fn note_reads(&self, n: u64, key: &[u8]) {
        self.inner.sm.load().note_many(n, key);
    }

    /// What this replica has seen lately, for splits by load.
    pub(crate) fn load(&self) -> &crate::load::Load {
        self.inner.sm.load()
    }

    /// Snapshots of this group streaming to or from this replica now, and
    /// those it sent or received whole since it started.
    pub fn snapshot_transfers(&self) -> crate::transfers::TransferCounts {
        self.inner.transfers.counts()
    }

    /// The requests a second this replica last counted (its range's
    /// writes, and the reads served here; taken once a second), or None
    /// where splits by load are off and nothing is counted.
    pub fn requests_per_sec(&self) -> Option<u64> {
        let load = self.load();
        load.counting().then(|| load.rate())
    }

    /// Whether this node is the leader now (as far as it knows).
    pub fn is_leader(&self) -> bool {
        self.inner.raft.metrics().borrow().current_leader == Some(self.inner.id)
    }

    /// The leader this node knows of and its address. Asked on every write
    /// and read-index round, so it reads the metrics in place rather than
    /// cloning them (membership and replication maps included).
    pub(crate) fn leader_addr(&self) -> Option<(NodeId, String)> {
        let metrics = self.inner.raft.metrics();
        let m = metrics.borrow();
        let leader = m.current_leader?;
        let addr = m
            .membership_config
            .membership()
            .get_node(&leader)?
            .addr
            .clone();
        Some((leader, addr))
    }
}

/// The applied log id as tests see it.
pub(crate) fn index_of(l: Option<LogId>) -> u64 {
    l.map_or(0, |l| l.index)
}

/// Reads waiting for the next read-index round.
/// Where a waiting read is told its read index or floor came.
pub(crate) type Answer = oneshot::Sender<Result<(), ClusterError>>;

/// Reads waiting for a read floor, each at its timestamp: one floor at
/// the highest serves them all (`read_at`).
#[derive(Debug, Default)]
pub(crate) struct FloorBatcher {
    pub(crate) queue: Mutex<Vec<(u64, Answer)>>,
    pub(crate) wake: Arc<Notify>,
}

#[derive(Debug, Default)]
pub(crate) struct ReadBatcher {
    pub(crate) queue: Mutex<Vec<oneshot::Sender<Result<(), ClusterError>>>>,
    pub(crate) wake: Arc<Notify>,
}

/// The last time this node heard from a leader (see the module's
/// documentation), in ms since the node started.
#[derive(Debug)]
pub(crate) struct Contact {
    start: Instant,
    last_ms: AtomicU64,
    /// When an append or snapshot last arrived from a leader, noted as it
    /// arrives, before openraft takes it (`appended`): the leader may count
    /// it toward its lease from then on.
    append_ms: AtomicU64,
}

impl Contact {
    pub(crate) fn new() -> Contact {
        Contact {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            append_ms: AtomicU64::new(0),
        }
    }

    /// Notes that an append (or a snapshot) arrived now.
    pub(crate) fn appended(&self) {
        // Rounded up, so that a stand is never early (and 0 stays "none").
        let ms = self.start.elapsed().as_millis() as u64 + 1;
        self.append_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// The earliest time this node may stand for election without breaking
    /// the lease of a leader whose append it took (`lease`): a lease after
    /// the last append that arrived (none: now).
    pub(crate) fn may_stand_from(&self, lease: Duration) -> Instant {
        match self.append_ms.load(Ordering::Relaxed) {
            0 => self.start,
            ms => self.start + Duration::from_millis(ms) + lease,
        }
    }

    /// Notes contact now.
    pub(crate) fn heard(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    pub(crate) fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// See the module's documentation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RestoredLeadership {
    /// The vote this node found saved: its own, committed.
    pub(crate) vote: Vote,
    /// The last entry of its log at the start.
    pub(crate) last: LogId,
}

impl RestoredLeadership {
    /// The leadership node `id` will restore from `log`, if any: openraft
    /// restores it when the saved vote is this node's own and committed.
    pub(crate) async fn find(
        id: NodeId,
        log: &LogStore,
    ) -> Result<Option<RestoredLeadership>, StartError> {
        let mut log = log.clone();
        let raft_error = |e: crate::types::StorageError| StartError::Raft(e.to_string());
        let vote = log.read_vote().await.map_err(raft_error)?;
        let last = log.get_log_state().await.map_err(raft_error)?.last_log_id;
        Ok(match (vote, last) {
            (Some(vote), Some(last)) if vote.is_committed() && vote.leader_id.node_id == id => {
                Some(RestoredLeadership { vote, last })
            }
            _ => None,
        })
    }
}
