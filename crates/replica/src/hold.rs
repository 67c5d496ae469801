//! Where a leader stands in handing its group over (`handover`): shared by
//! the parts a hand-over stops, the proposer (`group_commit`) and the
//! sends to peers (`network`), below the replica that starts it.

use std::sync::atomic::{AtomicU8, Ordering};

/// Where a leader stands in a hand-over, shared by the parts it stops.
#[derive(Debug, Default)]
pub(crate) struct Hold(AtomicU8);

pub(crate) const FREE: u8 = 0;
/// No new entry is proposed (the proposer waits).
pub(crate) const DRAINING: u8 = 1;
/// Nor is any append or heartbeat sent.
pub(crate) const SILENT: u8 = 2;

impl Hold {
    /// Whether proposals wait.
    pub(crate) fn proposals_wait(&self) -> bool {
        self.0.load(Ordering::Acquire) != FREE
    }

    /// Whether appends and heartbeats are withheld.
    pub(crate) fn silent(&self) -> bool {
        self.0.load(Ordering::Acquire) == SILENT
    }

    /// Starts a hand-over (proposals wait); false if one is under way.
    pub(crate) fn begin(&self) -> bool {
        self.0
            .compare_exchange(FREE, DRAINING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    pub(crate) fn set(&self, state: u8) {
        self.0.store(state, Ordering::Release);
    }
}
