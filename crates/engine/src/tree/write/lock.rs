//! Node locks: the lock bit of a buffer's state word, taken by a
//! compare-and-swap against the state the writer traversed, and held as a
//! guard. Dropping a guard unlocks what it holds by restoring the state it
//! was locked from, on every way out of a write, a panic included (in the
//! write's decision above all, which runs caller code with the leaf
//! locked): a node is never left locked by a writer that is gone. The
//! paths that change a node consume its guard instead: a log append
//! publishes the leaf's new state with the unlock; a structure change
//! marks what it replaced obsolete, locked for good.

use std::sync::atomic::Ordering as CoreOrdering;

use crate::tree::node::{NodePtr, STATE_LOCKED, STATE_OBSOLETE};

/// Locks `buf` if its state is still `expect` and neither locked nor
/// obsolete.
fn try_lock(buf: NodePtr, expect: u64) -> bool {
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

/// Restores the unlocked state `state` of a buffer this thread locked.
#[inline]
fn unlock(buf: NodePtr, state: u64) {
    crate::sync::schedule_point();
    buf.header().state.store(state, CoreOrdering::Release);
}

/// Marks a buffer this thread locked obsolete (replaced), locked for good:
/// writers that reach it restart.
#[inline]
fn make_obsolete(buf: NodePtr, state: u64) {
    crate::sync::schedule_point();
    buf.header()
        .state
        .store(state | STATE_LOCKED | STATE_OBSOLETE, CoreOrdering::Release);
}

/// The leaf a writer has locked, with the state it was locked from.
/// Dropped, it unlocks the leaf.
#[must_use = "dropping the guard unlocks the leaf"]
pub(super) struct LockedLeaf {
    buf: NodePtr,
    state: u64,
}

impl LockedLeaf {
    /// Locks `buf` if its state is still `state` (the one traversed).
    #[inline]
    pub(super) fn try_lock(buf: NodePtr, state: u64) -> Option<LockedLeaf> {
        // The guard exists only once the lock is taken: a guard built
        // before the compare-and-swap (`then_some`) and dropped when it
        // fails would unlock another writer's lock.
        if try_lock(buf, state) {
            Some(LockedLeaf { buf, state })
        } else {
            None
        }
    }

    /// The state the leaf was locked from: its published size, log count
    /// and sequence.
    #[inline(always)]
    pub(super) fn state(&self) -> u64 {
        self.state
    }

    /// Publishes a log append and unlocks, in one release store of the
    /// leaf's new state (`state`: unlocked, with the new size, log count
    /// and sequence).
    #[inline]
    pub(super) fn publish_append(self, state: u64) {
        debug_assert_eq!(state & STATE_LOCKED, 0, "a published append unlocks");
        let this = std::mem::ManuallyDrop::new(self);
        crate::sync::schedule_point();
        this.buf.header().state.store(state, CoreOrdering::Release);
    }

    /// The leaf was replaced (its new buffer is published): obsolete,
    /// locked for good.
    #[inline]
    pub(super) fn make_obsolete(self) {
        let this = std::mem::ManuallyDrop::new(self);
        make_obsolete(this.buf, this.state);
    }
}

impl Drop for LockedLeaf {
    fn drop(&mut self) {
        unlock(self.buf, self.state);
    }
}

/// A node a structure change has locked, with the state to restore.
#[derive(Clone, Copy)]
struct Held {
    buf: NodePtr,
    state: u64,
}

/// The nodes a structure change has locked (the leaf first). Dropped, it
/// unlocks every one, newest first; published, they become obsolete.
#[derive(Default)]
#[must_use = "dropping the locks unlocks every node"]
pub(super) struct HeldLocks(Vec<Held>);

impl HeldLocks {
    /// The locks of a structure change that starts at `leaf`.
    pub(super) fn starting_at(leaf: LockedLeaf) -> HeldLocks {
        let leaf = std::mem::ManuallyDrop::new(leaf);
        HeldLocks(vec![Held {
            buf: leaf.buf,
            state: leaf.state,
        }])
    }

    /// Whether `buf` is locked already.
    pub(super) fn holds(&self, buf: NodePtr) -> bool {
        self.0.iter().any(|h| h.buf == buf)
    }

    /// Tries to lock `buf` from `state`; true if it is now held.
    pub(super) fn try_lock(&mut self, buf: NodePtr, state: u64) -> bool {
        let locked = try_lock(buf, state);
        if locked {
            self.0.push(Held { buf, state });
        }
        locked
    }

    /// How many are held: a mark for `unlock_from`.
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// Unlocks those taken since `mark`, newest first (a node merge that
    /// could not take all its locks).
    pub(super) fn unlock_from(&mut self, mark: usize) {
        for h in self.0.drain(mark..).rev() {
            unlock(h.buf, h.state);
        }
    }

    /// Every held node was replaced (their new buffers are published):
    /// obsolete, locked for good.
    pub(super) fn make_obsolete(mut self) {
        for h in std::mem::take(&mut self.0) {
            make_obsolete(h.buf, h.state);
        }
    }
}

impl Drop for HeldLocks {
    fn drop(&mut self) {
        self.unlock_from(0);
    }
}
