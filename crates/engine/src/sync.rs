//! Every atomic and lock the engine uses comes from here, so that a test build
//! (`--features shuttle`) swaps in shuttle's versions and explores thread
//! schedules deterministically.

#[cfg(not(feature = "shuttle"))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU64, Ordering};

#[cfg(feature = "shuttle")]
pub(crate) use shuttle::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU64, Ordering};

#[cfg(not(feature = "shuttle"))]
pub(crate) use parking_lot::{Mutex, MutexGuard};

#[cfg(feature = "shuttle")]
pub(crate) use shuttle::sync::MutexGuard;

/// shuttle's mutex with parking_lot's non-poisoning `lock()` signature.
#[cfg(feature = "shuttle")]
#[derive(Debug, Default)]
pub(crate) struct Mutex<T>(shuttle::sync::Mutex<T>);

#[cfg(feature = "shuttle")]
impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(shuttle::sync::Mutex::new(value))
    }
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.0.try_lock().ok()
    }
}

/// Back off inside a wait loop: spin briefly, then give the core away (this
/// machine has two cores and more threads than that).
pub(crate) fn backoff(round: &mut u32) {
    #[cfg(feature = "shuttle")]
    {
        let _ = round;
        shuttle::thread::yield_now();
    }
    #[cfg(not(feature = "shuttle"))]
    {
        if *round < 6 {
            for _ in 0..(1u32 << *round) {
                std::hint::spin_loop();
            }
            *round += 1;
        } else {
            std::thread::yield_now();
        }
    }
}

/// A point where shuttle may switch threads. Node-header atomics live inside
/// raw buffers with a fixed layout, so they are core atomics; the protocol
/// steps that touch them call this first so shuttle still explores every
/// interleaving of those steps. A no-op in normal builds.
#[inline(always)]
pub(crate) fn schedule_point() {
    #[cfg(feature = "shuttle")]
    shuttle::thread::yield_now();
}

/// The transaction lock (`Store::txn_lock`): every write holds it shared
/// while it writes, a transaction exclusively. Sharded outside shuttle, so
/// that the shared side touches a line of its thread's own.
#[derive(Debug, Default)]
pub(crate) struct TxnLock {
    #[cfg(not(feature = "shuttle"))]
    lock: crossbeam_utils::sync::ShardedLock<()>,
    #[cfg(feature = "shuttle")]
    lock: shuttle::sync::RwLock<()>,
}

#[cfg(not(feature = "shuttle"))]
pub(crate) type SharedGuard<'a> = crossbeam_utils::sync::ShardedLockReadGuard<'a, ()>;
#[cfg(not(feature = "shuttle"))]
pub(crate) type ExclusiveGuard<'a> = crossbeam_utils::sync::ShardedLockWriteGuard<'a, ()>;
#[cfg(feature = "shuttle")]
pub(crate) type SharedGuard<'a> = shuttle::sync::RwLockReadGuard<'a, ()>;
#[cfg(feature = "shuttle")]
pub(crate) type ExclusiveGuard<'a> = shuttle::sync::RwLockWriteGuard<'a, ()>;

impl TxnLock {
    /// Nothing inside panics while holding it, but a poisoned lock would
    /// still guard nothing more than `()`: poisoning is ignored.
    pub(crate) fn shared(&self) -> SharedGuard<'_> {
        self.lock
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn exclusive(&self) -> ExclusiveGuard<'_> {
        self.lock
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
