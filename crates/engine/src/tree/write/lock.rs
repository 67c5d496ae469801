//! Node locks: the lock bit of a buffer's state word, taken by a
//! compare-and-swap against the state the writer traversed.

use std::sync::atomic::Ordering as CoreOrdering;

use crate::tree::node::{NodePtr, STATE_LOCKED, STATE_OBSOLETE};

/// A node a structure change has locked, with the state word to restore.
#[derive(Clone, Copy)]
pub(super) struct Held {
    pub(super) buf: NodePtr,
    pub(super) state: u64,
}

pub(super) fn try_lock(buf: NodePtr, expect: u64) -> bool {
    if expect & (STATE_LOCKED | STATE_OBSOLETE) != 0 {
        return false;
    }
    crate::sync::schedule_point();
    buf.header()
        .state
        .compare_exchange(
            expect,
            expect | STATE_LOCKED,
            CoreOrdering::Acquire,
            CoreOrdering::Relaxed,
        )
        .is_ok()
}

pub(super) fn unlock_all(held: &[Held]) {
    for h in held.iter().rev() {
        crate::sync::schedule_point();
        h.buf.header().state.store(h.state, CoreOrdering::Release);
    }
}
