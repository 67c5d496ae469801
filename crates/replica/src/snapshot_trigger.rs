//! Snapshots by log bytes. openraft 0.9 takes a snapshot every so many
//! entries (`SnapshotPolicy::LogsSinceLast`) whatever their size: with
//! large entries the log, on disk and in a follower's catch-up, would grow
//! to gigabytes before one came. This watch asks for a snapshot once the
//! entries applied since the last one take more than a set number of
//! bytes in the log; the entry-count policy stays as well.

use std::sync::Arc;
use std::time::Duration;

use openraft::{LogIdOptionExt, ServerState};

use crate::replica::Replica;

/// How often the log's size since the last snapshot is looked at. At the
/// log's fastest appends (some hundreds of MB a second) a snapshot comes at
/// most a few tens of MB late.
const CHECK_EVERY: Duration = Duration::from_millis(100);

impl Replica {
    /// Asks openraft for a snapshot whenever the records of the entries
    /// applied since the last snapshot pass `log_bytes` (0: never by
    /// bytes). openraft ignores the request while a snapshot is being
    /// built; the one it builds covers what is applied then.
    pub(crate) fn spawn_snapshot_trigger(&self, log_bytes: u64) {
        if log_bytes == 0 {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(CHECK_EVERY).await;
                let Some(inner) = weak.upgrade() else { return };
                let (snapshot, applied, state) = {
                    let m = inner.raft.metrics();
                    let m = m.borrow();
                    (m.snapshot, m.last_applied, m.state)
                };
                if state == ServerState::Shutdown {
                    return;
                }
                // Only applied entries can go into a snapshot: counting
                // ones not yet applied would ask again and again while
                // apply lags.
                let (from, to) = (snapshot.next_index(), applied.next_index());
                if to > from
                    && inner.log.bytes_in(from, to) >= log_bytes
                    && inner.raft.trigger().snapshot().await.is_err()
                {
                    return;
                }
            }
        });
    }
}
