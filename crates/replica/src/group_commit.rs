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
//! exactly as if it had been an entry of its own.

use std::sync::Arc;

use openraft::error::{ClientWriteError, Fatal, RaftError};
use openraft::{BasicNode, Raft};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, oneshot};

use crate::codec;
use crate::node::Replica;
use crate::types::{Batch, LogId, NodeId, TypeConfig};

/// The largest entry the proposer builds from queued proposals (a larger
/// single proposal still goes, alone).
const MAX_ENTRY_BYTES: usize = 4 << 20;

/// What became of a proposal: the entry it went into and its own results.
pub(crate) type Proposed = Result<(LogId, Vec<u8>), ProposeError>;

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

struct Pending {
    batch: Batch,
    tx: oneshot::Sender<Proposed>,
}

/// The queue of proposals waiting for an entry.
pub(crate) struct GroupCommit {
    queue: Mutex<Vec<Pending>>,
    wake: Arc<Notify>,
    entries: Arc<Semaphore>,
}

impl GroupCommit {
    pub(crate) fn new(entries_in_flight: usize) -> GroupCommit {
        GroupCommit {
            queue: Mutex::new(Vec::new()),
            wake: Arc::new(Notify::new()),
            entries: Arc::new(Semaphore::new(entries_in_flight.max(1))),
        }
    }

    /// Takes queued proposals up to an entry's worth (at least one).
    fn take(&self) -> Vec<Pending> {
        let mut queue = self.queue.lock();
        let mut bytes = 0;
        let n = queue
            .iter()
            .position(|p| {
                bytes += p.batch.ops.len();
                bytes > MAX_ENTRY_BYTES
            })
            .unwrap_or(queue.len())
            .max(1)
            .min(queue.len());
        queue.drain(..n).collect()
    }
}

impl Replica {
    /// Proposes `batch` on this node, which must be the leader, with
    /// whatever else is queued, and waits for its results.
    pub(crate) async fn propose_here(&self, batch: Batch) -> Proposed {
        let (tx, rx) = oneshot::channel();
        let group = &self.inner.group;
        group.queue.lock().push(Pending { batch, tx });
        group.wake.notify_one();
        rx.await
            .unwrap_or(Err(ProposeError::Raft(RaftError::Fatal(Fatal::Stopped))))
    }

    /// The proposer: turns the queue into entries, a few in flight at once.
    pub(crate) fn spawn_group_commit(&self) {
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            loop {
                let Some(inner) = weak.upgrade() else { return };
                let wake = Arc::clone(&inner.group.wake);
                drop(inner);
                wake.notified().await;
                loop {
                    let Some(inner) = weak.upgrade() else { return };
                    let entries = Arc::clone(&inner.group.entries);
                    drop(inner);
                    let Ok(place) = entries.acquire_owned().await else {
                        return;
                    };
                    let Some(inner) = weak.upgrade() else { return };
                    let taken = inner.group.take();
                    if taken.is_empty() {
                        break;
                    }
                    tokio::spawn(propose(inner.raft.clone(), taken, place));
                }
            }
        });
    }
}

/// Proposes `taken` as one entry and hands each proposal its results.
async fn propose(raft: Raft<TypeConfig>, taken: Vec<Pending>, _place: OwnedSemaphorePermit) {
    let (mut batches, mut waiting, mut counts) = (Vec::new(), Vec::new(), Vec::new());
    for p in taken {
        match codec::op_count(&p.batch.ops) {
            Ok(n) => {
                batches.push(p.batch);
                waiting.push(p.tx);
                counts.push(n);
            }
            Err(e) => {
                let _ = p.tx.send(Err(ProposeError::Malformed(e.to_string())));
            }
        }
    }
    let batch = match batches.len() {
        0 => return,
        1 => batches.pop().expect("one batch"),
        _ => Batch {
            // Each part was decided at its own clock; the entry's is the
            // latest (apply never lets the log's clock go back anyway).
            now_ms: batches.iter().map(|b| b.now_ms).max().unwrap_or(0),
            ops: codec::join_ops(batches.iter().map(|b| b.ops.as_slice())),
        },
    };
    let shares = match raft.client_write(batch).await {
        // A lone proposal's results are the entry's.
        Ok(r) if waiting.len() == 1 => Ok((r.log_id, vec![r.data.results])),
        Ok(r) => match codec::split_results(&r.data.results, &counts) {
            Ok(shares) => Ok((r.log_id, shares)),
            // Applied, but its answer cannot be read: say so, never "not
            // applied".
            Err(e) => {
                tracing::error!("the results of entry {} are unreadable: {e}", r.log_id);
                Err(ProposeError::Unreadable(e.to_string()))
            }
        },
        Err(e) => Err(ProposeError::Raft(e)),
    };
    match shares {
        Ok((log_id, shares)) => {
            for (tx, share) in waiting.into_iter().zip(shares) {
                let _ = tx.send(Ok((log_id, share)));
            }
        }
        Err(e) => {
            for tx in waiting {
                let _ = tx.send(Err(e.clone()));
            }
        }
    }
}
