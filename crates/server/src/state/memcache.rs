//! The state the memcached listener's connections share (part of
//! [`crate::state::Shared`]): its counters, named as memcached's `stats`
//! names them, and the delayed `flush_all` timer. The `stats` reply that
//! reads them is the protocol's (`crate::memcache::stats`).

use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use combkv::Store;
use parking_lot::{Condvar, Mutex};

use super::counter::Counter;

/// Counters named as memcached's `stats` names them (memcached listener only).
#[derive(Debug, Default)]
pub struct McStats {
    pub cmd_get: Counter,
    pub cmd_set: Counter,
    pub cmd_flush: Counter,
    pub cmd_touch: Counter,
    pub cmd_meta: Counter,
    pub get_hits: Counter,
    pub get_misses: Counter,
    pub delete_hits: Counter,
    pub delete_misses: Counter,
    pub incr_hits: Counter,
    pub incr_misses: Counter,
    pub decr_hits: Counter,
    pub decr_misses: Counter,
    pub cas_hits: Counter,
    pub cas_misses: Counter,
    pub cas_badval: Counter,
    pub touch_hits: Counter,
    pub touch_misses: Counter,
    pub store_too_large: Counter,
    pub store_no_memory: Counter,
    /// Items stored since start (successful storage commands).
    pub total_items: Counter,
}

impl McStats {
    pub(crate) fn all(&self) -> [(&'static str, &Counter); 21] {
        [
            ("cmd_get", &self.cmd_get),
            ("cmd_set", &self.cmd_set),
            ("cmd_flush", &self.cmd_flush),
            ("cmd_touch", &self.cmd_touch),
            ("cmd_meta", &self.cmd_meta),
            ("get_hits", &self.get_hits),
            ("get_misses", &self.get_misses),
            ("delete_misses", &self.delete_misses),
            ("delete_hits", &self.delete_hits),
            ("incr_misses", &self.incr_misses),
            ("incr_hits", &self.incr_hits),
            ("decr_misses", &self.decr_misses),
            ("decr_hits", &self.decr_hits),
            ("cas_misses", &self.cas_misses),
            ("cas_hits", &self.cas_hits),
            ("cas_badval", &self.cas_badval),
            ("touch_hits", &self.touch_hits),
            ("touch_misses", &self.touch_misses),
            ("store_too_large", &self.store_too_large),
            ("store_no_memory", &self.store_no_memory),
            ("total_items", &self.total_items),
        ]
    }

    /// `stats reset`: zeroes the memcached counters.
    pub fn reset(&self) {
        for (_, c) in self.all() {
            c.reset();
        }
    }
}

/// What the memcached connections share (part of [`crate::state::Shared`]).
#[derive(Debug, Default)]
pub struct McShared {
    pub stats: McStats,
    pub flush: Arc<FlushTimer>,
}

/// Delayed `flush_all <delay>`: memcached invalidates everything written
/// before the moment the delay ends, and a later `flush_all` replaces an
/// earlier pending one. One thread waits for the newest deadline; it holds
/// the store weakly, so a stopped server is not kept alive by it.
#[derive(Debug, Default)]
pub struct FlushTimer {
    state: Mutex<FlushState>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct FlushState {
    /// Unix ms at which to clear the store.
    deadline_ms: Option<u64>,
    thread_running: bool,
}

pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl FlushTimer {
    /// Cancels a pending delayed flush (an immediate one supersedes it).
    pub fn cancel(&self) {
        self.state.lock().deadline_ms = None;
        self.wake.notify_all();
    }

    /// Clears `store` at `deadline_ms` unless a later call changes it.
    pub fn schedule(self: &Arc<Self>, store: &Arc<Store>, deadline_ms: u64) {
        let mut st = self.state.lock();
        st.deadline_ms = Some(deadline_ms);
        self.wake.notify_all();
        if st.thread_running {
            return;
        }
        st.thread_running = true;
        drop(st);
        let timer = Arc::clone(self);
        let store = Arc::downgrade(store);
        let spawned = std::thread::Builder::new()
            .name("mc-flush".into())
            .spawn(move || timer.run(store));
        if spawned.is_err() {
            tracing::error!("cannot start the delayed flush_all thread");
            self.state.lock().thread_running = false;
        }
    }

    fn run(&self, store: Weak<Store>) {
        let mut st = self.state.lock();
        while let Some(at) = st.deadline_ms {
            let now = unix_ms();
            if now < at {
                // Wake at least every minute to notice a stopped server.
                let wait = Duration::from_millis((at - now).min(60_000));
                self.wake.wait_for(&mut st, wait);
                if store.strong_count() == 0 {
                    break;
                }
                continue;
            }
            st.deadline_ms = None;
            drop(st);
            if let Some(s) = store.upgrade()
                && let Err(e) = s.clear()
            {
                tracing::warn!(
                    "delayed flush_all failed: {e}; the items were kept, send flush_all again"
                );
            }
            st = self.state.lock();
        }
        st.thread_running = false;
    }
}
