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
