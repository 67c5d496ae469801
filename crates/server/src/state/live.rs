//! The settings CONFIG SET changes while the server runs. `Shared::config`
//! keeps what the server started with; each setting here is read where it
//! is used, on every use, so a change applies to the next request (and,
//! for `maxclients`, the next connection) without a restart.
//!
//! Which settings are live, and why the others are not, is
//! `docs/operations.md`, "Changing settings while serving".

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use parking_lot::Mutex;

use crate::config::{ByteSize, DurabilityMode, ServerConfig};

/// Changes the process's log filter (installed by the binary, which owns
/// the subscriber): Err says why a level was refused.
pub type LogLevelHook = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

static LOG_LEVEL_HOOK: OnceLock<LogLevelHook> = OnceLock::new();

/// Installs the hook CONFIG SET log-level calls (once per process).
pub fn on_log_level(hook: LogLevelHook) {
    let _ = LOG_LEVEL_HOOK.set(hook);
}

/// The settings CONFIG SET may change, as in use now.
#[derive(Debug)]
pub struct Live {
    maxmemory: AtomicU64,
    maxclients: AtomicUsize,
    max_request_bytes: AtomicU64,
    max_reply_bytes: AtomicU64,
    client_output_hard_limit: AtomicU64,
    max_total_query_bytes: AtomicU64,
    log_level: Mutex<String>,
    requirepass: Mutex<Option<String>>,
    latency_monitor_threshold: AtomicU64,
    hot_cache_entries: AtomicUsize,
    /// The mode the store's log is in (CONFIG SET switches the log first:
    /// `node::settings`).
    durability: Mutex<DurabilityMode>,
}

impl Live {
    pub fn new(c: &ServerConfig) -> Live {
        Live {
            maxmemory: AtomicU64::new(c.maxmemory.0),
            maxclients: AtomicUsize::new(c.maxclients),
            max_request_bytes: AtomicU64::new(c.max_request_bytes.0),
            max_reply_bytes: AtomicU64::new(c.max_reply_bytes.0),
            client_output_hard_limit: AtomicU64::new(c.client_output_hard_limit.0),
            max_total_query_bytes: AtomicU64::new(c.max_total_query_bytes.0),
            log_level: Mutex::new(c.log_level.clone()),
            requirepass: Mutex::new(c.requirepass.clone()),
            latency_monitor_threshold: AtomicU64::new(c.latency_monitor_threshold),
            hot_cache_entries: AtomicUsize::new(c.hot_cache_entries),
            durability: Mutex::new(c.durability_mode()),
        }
    }

    /// `latency-monitor-threshold` in milliseconds; 0: off.
    pub fn latency_monitor_threshold(&self) -> u64 {
        self.latency_monitor_threshold.load(Relaxed)
    }

    /// `hot-cache-entries`: each event loop's hot-entry cache slots; 0:
    /// none. Read by the loops between turns.
    pub fn hot_cache_entries(&self) -> usize {
        self.hot_cache_entries.load(Relaxed)
    }

    /// `durability` as the store's log is now.
    pub fn durability(&self) -> DurabilityMode {
        *self.durability.lock()
    }

    pub fn maxmemory(&self) -> u64 {
        self.maxmemory.load(Relaxed)
    }
    pub fn maxclients(&self) -> usize {
        self.maxclients.load(Relaxed)
    }
    pub fn max_request_bytes(&self) -> u64 {
        self.max_request_bytes.load(Relaxed)
    }
    pub fn max_reply_bytes(&self) -> usize {
        usize::try_from(self.max_reply_bytes.load(Relaxed)).unwrap_or(usize::MAX)
    }
    pub fn client_output_hard_limit(&self) -> usize {
        usize::try_from(self.client_output_hard_limit.load(Relaxed)).unwrap_or(usize::MAX)
    }
    pub fn max_total_query_bytes(&self) -> usize {
        usize::try_from(self.max_total_query_bytes.load(Relaxed)).unwrap_or(usize::MAX)
    }

    /// `config` with these settings as they are now (the slow log's are
    /// the slow log's own).
    pub fn overlay(&self, config: &ServerConfig) -> ServerConfig {
        let mut c = config.clone();
        c.maxmemory = ByteSize(self.maxmemory());
        c.maxclients = self.maxclients();
        c.max_request_bytes = ByteSize(self.max_request_bytes());
        c.max_reply_bytes = ByteSize(self.max_reply_bytes.load(Relaxed));
        c.client_output_hard_limit = ByteSize(self.client_output_hard_limit.load(Relaxed));
        c.max_total_query_bytes = ByteSize(self.max_total_query_bytes.load(Relaxed));
        c.log_level = self.log_level.lock().clone();
        c.requirepass = self.requirepass.lock().clone();
        c.latency_monitor_threshold = self.latency_monitor_threshold();
        c.hot_cache_entries = self.hot_cache_entries();
        c.durability = Some(self.durability());
        c
    }

    /// Puts `next`'s values in place (a configuration already checked as
    /// at start). The log level goes first: it alone can still be refused
    /// (by the hook), and then nothing has changed.
    pub fn apply(&self, next: &ServerConfig) -> Result<(), String> {
        {
            let mut level = self.log_level.lock();
            if *level != next.log_level {
                if let Some(hook) = LOG_LEVEL_HOOK.get() {
                    hook(&next.log_level)?;
                }
                *level = next.log_level.clone();
            }
        }
        self.maxmemory.store(next.maxmemory.0, Relaxed);
        self.maxclients.store(next.maxclients, Relaxed);
        self.max_request_bytes
            .store(next.max_request_bytes.0, Relaxed);
        self.max_reply_bytes.store(next.max_reply_bytes.0, Relaxed);
        self.client_output_hard_limit
            .store(next.client_output_hard_limit.0, Relaxed);
        self.max_total_query_bytes
            .store(next.max_total_query_bytes.0, Relaxed);
        self.requirepass.lock().clone_from(&next.requirepass);
        self.latency_monitor_threshold
            .store(next.latency_monitor_threshold, Relaxed);
        self.hot_cache_entries
            .store(next.hot_cache_entries, Relaxed);
        *self.durability.lock() = next.durability_mode();
        Ok(())
    }
}
