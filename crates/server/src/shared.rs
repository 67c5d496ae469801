//! State every event loop shares: the store, the configuration, counters,
//! the slow log and the client registry.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use combkv::Store;
use parking_lot::Mutex;

use crate::config::ServerConfig;
use crate::slowlog::SlowLog;

/// Server-wide counters (INFO stats, memcached stats, Prometheus).
#[derive(Debug, Default)]
pub struct Stats {
    pub connections_received: AtomicU64,
    pub connections_rejected: AtomicU64,
    pub commands_processed: AtomicU64,
    pub keyspace_hits: AtomicU64,
    pub keyspace_misses: AtomicU64,
    pub net_input_bytes: AtomicU64,
    pub net_output_bytes: AtomicU64,
    pub errors_replied: AtomicU64,
    pub read_batches: AtomicU64,
    pub read_batch_requests: AtomicU64,
    pub writes_refused_oom: AtomicU64,
    pub protocol_errors: AtomicU64,
}

impl Stats {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// One connected client as CLIENT and INFO see it.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    pub id: u64,
    pub addr: String,
    pub name: Option<String>,
    pub connected_at: Instant,
    pub protocol: &'static str,
}

/// What the event loops share.
#[derive(Debug)]
pub struct Shared {
    pub store: Arc<Store>,
    pub config: ServerConfig,
    pub stats: Stats,
    pub slowlog: SlowLog,
    pub started_at: Instant,
    pub started_unix: SystemTime,
    /// Connections open now, both listeners.
    pub clients: AtomicUsize,
    pub next_client_id: AtomicU64,
    /// Resident set size in bytes, sampled by the housekeeping thread: what
    /// `maxmemory` is compared against.
    pub used_memory: AtomicU64,
    /// Highest `used_memory` seen.
    pub used_memory_peak: AtomicU64,
    pub shutting_down: AtomicBool,
    /// Unix time of the last successful checkpoint (SAVE/BGSAVE/automatic).
    pub last_save_unix: AtomicU64,
    pub client_registry: Mutex<std::collections::BTreeMap<u64, ClientInfo>>,
    pub scan_cursors: Mutex<ScanCursors>,
}

/// SCAN cursors: a cursor number names the last key a SCAN call returned.
/// At most `MAX_CURSORS` are kept; the oldest are forgotten first (a client
/// resuming a forgotten cursor gets `ERR invalid cursor`).
#[derive(Debug, Default)]
pub struct ScanCursors {
    next: u64,
    live: std::collections::BTreeMap<u64, Vec<u8>>,
}

const MAX_CURSORS: usize = 65_536;

impl ScanCursors {
    /// A new cursor for a scan that stopped after `last_key`.
    pub fn put(&mut self, last_key: Vec<u8>) -> u64 {
        self.next += 1;
        let id = self.next;
        self.live.insert(id, last_key);
        while self.live.len() > MAX_CURSORS {
            self.live.pop_first();
        }
        id
    }

    /// The key a cursor stopped after (a cursor may be resumed again, e.g.
    /// by a client retrying after a lost reply).
    pub fn take(&mut self, id: u64) -> Option<Vec<u8>> {
        self.live.get(&id).cloned()
    }
}

impl Shared {
    pub fn new(store: Arc<Store>, config: ServerConfig) -> Shared {
        let slowlog = SlowLog::new(config.slowlog_max_len, config.slowlog_log_slower_than);
        let now = SystemTime::now();
        Shared {
            store,
            config,
            stats: Stats::default(),
            slowlog,
            started_at: Instant::now(),
            started_unix: now,
            clients: AtomicUsize::new(0),
            next_client_id: AtomicU64::new(1),
            used_memory: AtomicU64::new(resident_bytes()),
            used_memory_peak: AtomicU64::new(0),
            shutting_down: AtomicBool::new(false),
            last_save_unix: AtomicU64::new(
                now.duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
            ),
            client_registry: Mutex::new(Default::default()),
            scan_cursors: Mutex::new(Default::default()),
        }
    }

    /// True when writes must be refused for memory.
    pub fn over_maxmemory(&self) -> bool {
        let max = self.config.maxmemory.0;
        max != 0 && self.used_memory.load(Ordering::Relaxed) > max
    }

    /// Re-reads the resident set size.
    pub fn sample_memory(&self) {
        let rss = resident_bytes();
        self.used_memory.store(rss, Ordering::Relaxed);
        self.used_memory_peak.fetch_max(rss, Ordering::Relaxed);
    }

    /// CONFIG RESETSTAT: zeroes the counters.
    pub fn reset_stats(&self) {
        let s = &self.stats;
        for c in [
            &s.connections_received,
            &s.connections_rejected,
            &s.commands_processed,
            &s.keyspace_hits,
            &s.keyspace_misses,
            &s.net_input_bytes,
            &s.net_output_bytes,
            &s.errors_replied,
            &s.read_batches,
            &s.read_batch_requests,
            &s.writes_refused_oom,
            &s.protocol_errors,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        self.slowlog.reset();
    }

    pub fn uptime(&self) -> Duration {
        self.started_at.elapsed()
    }
}

/// The process's resident set size from `/proc/self/statm` (0 where there
/// is no procfs).
pub fn resident_bytes() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * page.max(4096) as u64
}
