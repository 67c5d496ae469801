//! Raft snapshots on their way between a group's replicas, for operators
//! (INFO's `ranges_snapshots_*`, as PD counts the snapshots each TiKV
//! store is sending and receiving): a replica added by a move, or a
//! follower too far behind the log, catches up by a snapshot streamed in
//! chunks. Each chunk sent to a follower, or received from the leader,
//! marks its transfer under way until its last chunk is answered; one
//! that has had no chunk for [`STALLED`] (a leader that gave up, a
//! follower that went away) no longer counts. Transfers finished are
//! counted too.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::types::NodeId;

/// A transfer with no chunk for this long counts as given up.
const STALLED: Duration = Duration::from_secs(10);

/// One group's snapshot transfers (see the module's documentation).
#[derive(Debug, Default)]
pub(crate) struct Transfers {
    /// To each follower: when its last chunk went.
    sending: Mutex<HashMap<NodeId, Instant>>,
    /// From the leader: when the last chunk came.
    receiving: Mutex<Option<Instant>>,
    sent: AtomicU64,
    received: AtomicU64,
}

/// What [`Transfers::counts`] answers.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TransferCounts {
    /// Snapshots being sent now (one per follower).
    pub sending: u64,
    /// Snapshots being received now (0 or 1).
    pub receiving: u64,
    /// Snapshots sent whole since the replica started.
    pub sent: u64,
    /// Snapshots received whole since the replica started.
    pub received: u64,
}

impl Transfers {
    /// A chunk goes to follower `to`.
    pub(crate) fn sending(&self, to: NodeId) {
        self.sending.lock().insert(to, Instant::now());
    }

    /// The chunk to `to` was answered; `last`: it ended the snapshot, and
    /// `ok`: the follower took it.
    pub(crate) fn sent(&self, to: NodeId, last: bool, ok: bool) {
        if last && ok {
            self.sending.lock().remove(&to);
            self.sent.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A chunk came from the leader.
    pub(crate) fn receiving(&self) {
        *self.receiving.lock() = Some(Instant::now());
    }

    /// The chunk was taken in; `last`: it ended the snapshot (installed).
    pub(crate) fn received(&self, last: bool, ok: bool) {
        if last && ok {
            *self.receiving.lock() = None;
            self.received.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Transfers under way now, and finished so far.
    pub(crate) fn counts(&self) -> TransferCounts {
        let live = |at: &Instant| at.elapsed() < STALLED;
        TransferCounts {
            sending: self.sending.lock().values().filter(|at| live(at)).count() as u64,
            receiving: u64::from(self.receiving.lock().as_ref().is_some_and(live)),
            sent: self.sent.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transfer counts while its chunks come, until its last is taken,
    /// or until it stalls; only whole ones are counted finished.
    #[tokio::test(start_paused = true)]
    async fn a_transfer_counts_until_its_last_chunk_or_it_stalls() {
        let t = Transfers::default();
        t.sending(2);
        t.sent(2, false, true);
        t.sending(3);
        t.sent(3, true, false);
        t.receiving();
        assert_eq!(
            t.counts(),
            TransferCounts {
                sending: 2,
                receiving: 1,
                sent: 0,
                received: 0
            }
        );
        t.sending(2);
        t.sent(2, true, true);
        t.received(true, true);
        assert_eq!(
            t.counts(),
            TransferCounts {
                sending: 1,
                receiving: 0,
                sent: 1,
                received: 1
            }
        );
        // Node 3's last chunk was refused and nothing came since.
        tokio::time::advance(STALLED).await;
        assert_eq!(t.counts().sending, 0);
    }
}
