//! Group commit on the leader. Every proposal (this node's clients' writes
//! and those its followers forward) joins a queue; a proposer takes
//! everything queued as one log entry, so that the writes of many clients
//! share one append, one fsync on each node and one quorum round. At most
//! [`ReplicaConfig::entries_in_flight`](crate::ReplicaConfig) entries are
//! in flight at once: while they are, the queue fills, and the next entry
//! carries all of it. A lone write on an idle node still goes at once.
//!
//! Joining keeps each proposal's ops together and in order, and the entry's
//! results are cut back into each proposal's share, so a joined write reads
//! exactly as if it had been an entry of its own. The shares stay typed:
//! a proposal of this node's clients gets its outcomes as values, and only
//! a forwarded one's are encoded, to go back over the network.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use openraft::error::{ClientWriteError, Fatal, RaftError};
use openraft::{BasicNode, Raft};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, oneshot};

use combkv::Error;
use combkv::op::Outcome;

use crate::codec;
use crate::error::ClusterError;
use crate::hold::Hold;
use crate::ranges::clock::wall_ms;
use crate::ranges::{ClockOffset, Timestamp};
use crate::types::{Batch, LogId, NodeId, TypeConfig};

/// The largest entry the proposer builds from queued proposals (a larger
/// single proposal still goes, alone).
const MAX_ENTRY_BYTES: usize = 4 << 20;

/// What became of a proposal: the entry it went into and its own results.
pub(crate) type Proposed = Result<(LogId, Vec<Result<Outcome, Error>>), ProposeError>;

/// [`Proposed`] as it crosses the network, the answer to a forwarded
/// batch: the results encoded by [`codec`].
pub(crate) type Forwarded = Result<(LogId, Vec<u8>), ProposeError>;

/// Encodes a forwarded batch's results for its answer.
pub(crate) fn encode(results: &[Result<Outcome, Error>]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for r in results {
        codec::encode_result(r, &mut bytes);
    }
    bytes
}

/// Whether this node is above its memory limit. The server sets it each
/// time it samples its memory (`maxmemory`); while it is set, this node,
/// as a range's leader, refuses the ops of a proposal that can add data
/// ([`Op::may_add_data`](combkv::op::Op::may_add_data)), whichever node
/// the write came in at, and proposes the rest. So data is added to a
/// range only while its leader's node has room, as Redis Cluster's
/// primary checks its own memory, not the node the client wrote to.
#[derive(Debug, Clone, Default)]
pub struct MemoryGate(Arc<AtomicBool>);

impl MemoryGate {
    /// Tells the gate whether the node is above its limit now.
    pub fn set_full(&self, full: bool) {
        self.0.store(full, Ordering::Relaxed);
    }

    /// Whether the node is above its limit, as last told.
    pub fn is_full(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Why a proposal was not applied.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum ProposeError {
    /// openraft refused or lost the entry.
    Raft(RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>),
    /// The proposal's ops do not decode; nothing was proposed.
    Malformed(String),
    /// The entry was applied, but its results could not be read back.
    Unreadable(String),
}

impl ProposeError {
    /// The error a client gets for a proposal that failed for good (a
    /// refusal to forward to the leader is retried instead, before this).
    pub(crate) fn into_cluster_error(self) -> ClusterError {
        match self {
            ProposeError::Raft(RaftError::Fatal(_)) => {
                ClusterError::Unknown("the leader stopped".into())
            }
            ProposeError::Unreadable(why) => ClusterError::Unknown(why),
            ProposeError::Raft(e) => ClusterError::Refused(e.to_string()),
            ProposeError::Malformed(why) => {
                ClusterError::Refused(format!("a malformed write: {why}"))
            }
        }
    }
}

struct Pending {
    batch: Batch,
    /// How many ops the batch holds (its list's count; the ops themselves
    /// are decoded once, where the entry is applied).
    count: usize,
    tx: oneshot::Sender<Proposed>,
}

/// The queue of proposals waiting for an entry, and the Raft instance that
/// proposes them.
pub(crate) struct GroupCommit {
    raft: Raft<TypeConfig>,
    queue: Mutex<Vec<Pending>>,
    wake: Arc<Notify>,
    entries: Arc<Semaphore>,
    /// The permits `entries` was given, never fewer than the setting's
    /// nor than the bound's share ([`GroupCommit::follow_bound`]).
    granted: AtomicUsize,
    /// Proposals wait while the leader hands its group over.
    hold: Arc<Hold>,
    /// Set while the node is above its memory limit.
    memory: MemoryGate,
    /// The bound on the nodes' clock offset: how far ahead of this
    /// leader's clock a proposal's may be.
    offset: ClockOffset,
}

/// The most entries in flight the clock offset's bound asks for.
const MAX_ENTRIES_FOR_BOUND: usize = 16;

impl GroupCommit {
    /// The queue of a node whose entries `raft` proposes.
    pub(crate) fn new(
        raft: Raft<TypeConfig>,
        entries_in_flight: usize,
        hold: Arc<Hold>,
        memory: MemoryGate,
        offset: ClockOffset,
    ) -> GroupCommit {
        GroupCommit {
            raft,
            queue: Mutex::new(Vec::new()),
            wake: Arc::new(Notify::new()),
            entries: Arc::new(Semaphore::new(entries_in_flight.max(1))),
            granted: AtomicUsize::new(entries_in_flight.max(1)),
            hold,
            memory,
            offset,
        }
    }

    /// An entry is in flight until it applies, and a commit wait of the
    /// clock offset's bound holds it that long: one more entry in flight
    /// per millisecond of the bound (up to 16) keeps the range taking
    /// writes, and read floors, meanwhile. The bound can rise after the
    /// group started (a member published a larger one,
    /// [`ClockOffset::adopt`]), so the permits follow it up; they are not
    /// taken back if it falls.
    /// Called on every proposal: a load, and a write only when the bound
    /// rose.
    fn follow_bound(&self) {
        let want = (1 + self.offset.bound_ms() as usize).min(MAX_ENTRIES_FOR_BOUND);
        if want <= self.granted.load(Ordering::Relaxed) {
            return;
        }
        let had = self.granted.fetch_max(want, Ordering::AcqRel);
        if want > had {
            self.entries.add_permits(want - had);
        }
    }

    /// Wakes the proposer (a hand-over ended: what queued meanwhile goes).
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    /// Proposes `batch` on this node, which must be the leader, with
    /// whatever else is queued, and waits for its results. Above the
    /// node's memory limit, its ops that can add data are answered
    /// [`Error::NoMemory`] and the rest proposed.
    ///
    /// A batch whose clock runs ahead of this leader's by more than the
    /// bound on the nodes' clock offset (and [`SLACK_MS`]) would give the
    /// range versions past every node's commit wait: a read floor from
    /// such a clock is refused (the read across ranges it serves fails,
    /// on the node whose clock is off), and writes take this leader's
    /// latest allowed clock instead.
    ///
    /// [`SLACK_MS`]: crate::ranges::clock::SLACK_MS
    pub(crate) async fn propose(&self, mut batch: Batch) -> Proposed {
        self.follow_bound();
        let wall = wall_ms();
        let limit = self.offset.limit_ms(wall);
        if batch.now_ms > limit {
            let ahead = batch.now_ms - wall;
            self.offset.proposal_ahead(ahead, wall);
            let floor = match codec::decode_floor(&batch.ops) {
                Some(Ok((at, _))) => Some(Timestamp(at)).filter(|at| at.millis() > limit),
                _ => None,
            };
            let applied = self.raft.metrics().borrow().last_applied;
            if let (Some(at), Some(log_id)) = (floor, applied) {
                let why = format!(
                    "a read floor at {at} from a clock {ahead} ms ahead of the range's leader, \
                     past cluster-max-clock-offset ({} ms): synchronise this node's clock",
                    self.offset.bound_ms()
                );
                return Ok((log_id, vec![Err(Error::Unavailable(why))]));
            }
            batch.now_ms = limit;
        }
        if self.memory.is_full()
            && let Some((adds, kept)) = without_adding(&batch.ops)
        {
            let kept = Batch {
                now_ms: batch.now_ms,
                ops: kept,
            };
            return self.propose_within_memory(kept, &adds).await;
        }
        self.propose_queued(batch).await
    }

    /// [`GroupCommit::propose`] of `kept`, the ops of a batch that `adds`
    /// does not mark; the marked ones answered [`Error::NoMemory`], each
    /// in its place. With none kept, no entry: the answer names the last
    /// one applied here (a read after it sees all the batch did: nothing).
    async fn propose_within_memory(&self, kept: Batch, adds: &[bool]) -> Proposed {
        if adds.iter().all(|&a| a) {
            let applied = self.raft.metrics().borrow().last_applied;
            if let Some(log_id) = applied {
                return Ok((log_id, adds.iter().map(|_| Err(Error::NoMemory)).collect()));
            }
        }
        let (log_id, results) = self.propose_queued(kept).await?;
        let mut results = results.into_iter();
        let mut out = Vec::with_capacity(adds.len());
        for &a in adds {
            out.push(if a {
                Err(Error::NoMemory)
            } else {
                results.next().ok_or_else(|| {
                    ProposeError::Unreadable("fewer results than ops proposed".into())
                })?
            });
        }
        Ok((log_id, out))
    }

    /// [`GroupCommit::propose`], the batch taken as it is.
    async fn propose_queued(&self, batch: Batch) -> Proposed {
        let count = match codec::list_count(&batch.ops) {
            Ok(n) => n,
            Err(e) => return Err(ProposeError::Malformed(e.to_string())),
        };
        let (tx, rx) = oneshot::channel();
        self.queue.lock().push(Pending { batch, count, tx });
        self.wake.notify_one();
        rx.await
            .unwrap_or(Err(ProposeError::Raft(RaftError::Fatal(Fatal::Stopped))))
    }

    /// Takes queued proposals up to an entry's worth (at least one).
    /// A setting or a change of the range map (`codec::stands_alone`) is
    /// an entry of its own.
    fn take(&self) -> Vec<Pending> {
        let mut queue = self.queue.lock();
        if queue
            .first()
            .is_some_and(|p| codec::stands_alone(&p.batch.ops))
        {
            return queue.drain(..1).collect();
        }
        let mut bytes = 0;
        let n = queue
            .iter()
            .position(|p| {
                bytes += p.batch.ops.len();
                bytes > MAX_ENTRY_BYTES || codec::stands_alone(&p.batch.ops)
            })
            .unwrap_or(queue.len())
            .max(1)
            .min(queue.len());
        queue.drain(..n).collect()
    }

    /// The proposer: turns the queue into entries, a few in flight at once,
    /// until the queue is dropped with its node.
    pub(crate) fn spawn(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(group) = weak.upgrade() else { return };
                let wake = Arc::clone(&group.wake);
                drop(group);
                wake.notified().await;
                loop {
                    let Some(group) = weak.upgrade() else { return };
                    let entries = Arc::clone(&group.entries);
                    drop(group);
                    let Ok(place) = entries.acquire_owned().await else {
                        return;
                    };
                    let Some(group) = weak.upgrade() else { return };
                    if group.hold.proposals_wait() {
                        // Nothing new enters the log while the leadership
                        // is handed over; the hand-over wakes this again.
                        break;
                    }
                    let taken = group.take();
                    if taken.is_empty() {
                        break;
                    }
                    tokio::spawn(propose(group.raft.clone(), taken, place));
                }
            }
        });
    }
}

/// Which ops of the list `ops` can add data, and the list of the others,
/// if any can (none, or a list that does not decode: proposed as it is,
/// and refused there if it must be).
fn without_adding(ops: &[u8]) -> Option<(Vec<bool>, Vec<u8>)> {
    let ops = codec::decode_ops(ops).ok()?;
    let adds: Vec<bool> = ops.iter().map(|op| op.may_add_data()).collect();
    if !adds.contains(&true) {
        return None;
    }
    let mut kept = codec::OpList::default();
    for (op, _) in ops.iter().zip(&adds).filter(|(_, a)| !**a) {
        kept.push(op);
    }
    Some((adds, kept.finish()))
}

/// Proposes `taken` as one entry and hands each proposal its results.
async fn propose(raft: Raft<TypeConfig>, mut taken: Vec<Pending>, _place: OwnedSemaphorePermit) {
    let batch = match taken.len() {
        0 => return,
        1 => std::mem::replace(&mut taken[0].batch, Batch::empty()),
        _ => Batch {
            // Each part was decided at its own clock; the entry's is the
            // latest (apply never lets the log's clock go back anyway).
            now_ms: taken.iter().map(|p| p.batch.now_ms).max().unwrap_or(0),
            ops: codec::join_ops(taken.iter().map(|p| p.batch.ops.as_slice())),
        },
    };
    let (log_id, mut results) = match raft.client_write(batch).await {
        Ok(r) => (r.log_id, r.data.results),
        Err(e) => {
            let e = ProposeError::Raft(e);
            for p in taken {
                let _ = p.tx.send(Err(e.clone()));
            }
            return;
        }
    };
    let expected: usize = taken.iter().map(|p| p.count).sum();
    if results.len() != expected {
        // The entry did not apply as proposed (its ops did not decode):
        // nothing of it was applied, on any replica.
        tracing::error!(
            "entry {log_id} answered {} results for {expected} ops",
            results.len()
        );
        let e = ProposeError::Malformed(format!("entry {log_id} did not apply"));
        for p in taken {
            let _ = p.tx.send(Err(e.clone()));
        }
        return;
    }
    // Cut from the back, so each share is a split, not a copy.
    for p in taken.into_iter().rev() {
        let share = results.split_off(results.len() - p.count);
        let _ = p.tx.send(Ok((log_id, share)));
    }
}
