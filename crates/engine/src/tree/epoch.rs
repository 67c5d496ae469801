//! Epoch-based protection of node buffers: crossbeam-epoch behind the few
//! calls the tree needs. A reader pins before it loads the read version and
//! stays pinned while it holds buffer pointers; a buffer unlinked from every
//! chain is freed only after every guard pinned before the unlink is gone.

pub(crate) use crossbeam_epoch::Guard;

pub(crate) fn pin() -> Guard {
    crossbeam_epoch::pin()
}

/// Runs `f` once no thread pinned before this call is still pinned.
pub(crate) fn defer<F: FnOnce() + Send + 'static>(guard: &Guard, f: F) {
    guard.defer(f);
}

/// Pushes this thread's deferred work to the global queue and lets the epoch
/// advance, so that deferred frees run. Tests and `Store::collect` use it.
pub fn flush_reclamation() {
    for _ in 0..8 {
        crossbeam_epoch::pin().flush();
    }
}
