//! Epoch-based protection of node buffers: crossbeam-epoch behind the few
//! calls the tree needs. A reader pins before it loads the read version and
//! stays pinned while it holds buffer pointers; a buffer unlinked from every
//! chain is freed only after every guard pinned before the unlink is gone.
//!
//! Production builds use crossbeam's global collector (a thread-local handle,
//! the cheapest pin). Shuttle builds give each store its own collector and
//! register per pin: shuttle runs all its threads on one OS thread, and a
//! shared collector would run one execution's deferred work in another.

pub(crate) use crossbeam_epoch::Guard;

#[derive(Debug, Default)]
pub(crate) struct Epochs {
    #[cfg(feature = "shuttle")]
    collector: crossbeam_epoch::Collector,
}

impl Epochs {
    pub(crate) fn pin(&self) -> Guard {
        #[cfg(not(feature = "shuttle"))]
        {
            crossbeam_epoch::pin()
        }
        #[cfg(feature = "shuttle")]
        {
            self.collector.register().pin()
        }
    }

    /// Pushes deferred work along so that frees whose grace has passed run.
    pub(crate) fn flush(&self) {
        for _ in 0..8 {
            self.pin().flush();
        }
    }
}

/// Runs `f` once no thread pinned before this call is still pinned.
pub(crate) fn defer<F: FnOnce() + Send + 'static>(guard: &Guard, f: F) {
    guard.defer(f);
}

/// Lets the process-wide epoch advance so that deferred frees run (tests use
/// it after dropping a store to see every buffer freed).
pub fn flush_reclamation() {
    for _ in 0..8 {
        crossbeam_epoch::pin().flush();
    }
}
