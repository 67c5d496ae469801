//! State every event loop shares: the store, the configuration, counters,
//! the slow log and the client registry.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use combkv::Store;
use parking_lot::Mutex;

use super::counter::Counter;
use crate::config::ServerConfig;
use crate::state::slowlog::SlowLog;

/// Server-wide counters (INFO stats, memcached stats, Prometheus).
#[derive(Debug, Default)]
pub struct Stats {
    pub connections_received: Counter,
    pub connections_rejected: Counter,
    pub commands_processed: Counter,
    /// Requests parsed: one per request answered, plus one for each time
    /// a request waited (for a read index, or for the reply budget) and
    /// was parsed again.
    pub requests_parsed: Counter,
    pub keyspace_hits: Counter,
    pub keyspace_misses: Counter,
    pub net_input_bytes: Counter,
    pub net_output_bytes: Counter,
    pub errors_replied: Counter,
    pub read_batches: Counter,
    pub read_batch_requests: Counter,
    /// GETs the event loops' hot-entry caches answered, and those they
    /// passed to the read engine.
    pub hot_cache_hits: Counter,
    pub hot_cache_misses: Counter,
    pub writes_refused_oom: Counter,
    /// Large bulk strings received into a buffer of their own (RESP), and
    /// those of them a write stored as they were, without a copy.
    pub large_values_received: Counter,
    pub large_values_stored_uncopied: Counter,
    /// Large values of replies sent from the store's shared bytes instead
    /// of copied into the output buffer.
    pub large_values_sent_uncopied: Counter,
    pub protocol_errors: Counter,
    /// Clients disconnected for passing `client-output-hard-limit`.
    pub output_limit_disconnections: Counter,
    /// Clients refused for `max-total-query-bytes`.
    pub query_limit_disconnections: Counter,
    /// Times a cluster node saw its leader change (to another node, or to
    /// none); counted by housekeeping, once a tick at most.
    pub raft_leader_changes: Counter,
}

impl Stats {
    pub fn add(counter: &Counter, n: u64) {
        counter.add(n);
    }

    /// Adds what a thread's hot cache counted since it last did.
    pub fn add_hot_cache(&self, batch: &mut combkv::readexec::BatchResults) {
        if let Some(c) = batch.hot_cache_mut() {
            let d = c.unpublished();
            self.hot_cache_hits.add(d.hits);
            self.hot_cache_misses.add(d.misses);
        }
    }
    pub fn get(counter: &Counter) -> u64 {
        counter.get()
    }
}

/// What this process serves, once recovered: a single node's store, or a
/// cluster node's Raft node (whose store it replaces whole when it
/// installs a snapshot).
#[derive(Debug)]
pub enum Node {
    Single(Arc<Store>),
    Cluster(Box<crate::cluster::Cluster>),
}

/// What the event loops share.
#[derive(Debug)]
pub struct Shared {
    /// Set once the store is recovered (`Server::start`); the event loops
    /// answer `LOADING` before (see `readiness`).
    node: std::sync::OnceLock<Node>,
    /// An empty store served while `node` is not set: nothing writes it
    /// (every command that touches data is refused while loading), but
    /// INFO, metrics and housekeeping need a store to look at.
    loading_store: Arc<Store>,
    /// Whether the node serves yet (`/readyz`, `LOADING`).
    pub readiness: super::readiness::Readiness,
    /// What the server started with (flags, file, defaults).
    pub config: ServerConfig,
    /// The settings CONFIG SET changes while serving, as in use now.
    pub live: super::live::Live,
    pub stats: Stats,
    pub slowlog: SlowLog,
    pub started_at: Instant,
    pub started_unix: SystemTime,
    /// Connections open now, both listeners.
    pub clients: AtomicUsize,
    pub next_client_id: AtomicU64,
    /// What `maxmemory` is compared against, sampled by the housekeeping
    /// thread: the bytes the store holds (`Store::memory`: node buffers and
    /// out-of-line values, counted as they are allocated and reclaimed)
    /// plus every connection's buffers. Not the resident size, which stays
    /// up after data is deleted (freed node buffers stay mapped for reuse,
    /// the allocator keeps what it freed): a FLUSHALL would leave every
    /// write refused.
    pub used_memory: AtomicU64,
    /// What the store held when the server started (MEMORY STATS's
    /// `startup.allocated`).
    pub startup_memory: u64,
    /// Highest `used_memory` seen.
    pub used_memory_peak: AtomicU64,
    /// The process's resident set size, sampled with `used_memory` (INFO
    /// `used_memory_rss`; nothing is judged by it).
    pub used_memory_rss: AtomicU64,
    /// Bytes of every connection's input buffer (`max-total-query-bytes`).
    pub query_buffers: AtomicUsize,
    /// Bytes of every connection's output buffer.
    pub output_buffers: AtomicUsize,
    pub shutting_down: AtomicBool,
    /// Every event loop's and the acceptor's waker, set once they exist:
    /// what `stop` wakes.
    pub wakers: std::sync::OnceLock<Vec<Arc<mio::Waker>>>,
    /// Unix time of the last successful checkpoint (SAVE/BGSAVE/automatic).
    pub last_save_unix: AtomicU64,
    /// Every connection, by id (CLIENT LIST and KILL; see `clients`).
    pub client_registry: Mutex<std::collections::BTreeMap<u64, Arc<super::clients::ClientEntry>>>,
    /// CLIENT PAUSE.
    pub pause: super::clients::Pause,
    pub scan_cursors: Mutex<ScanCursors>,
    /// memcached counters and the delayed flush_all timer.
    pub memcache: super::memcache::McShared,
    /// The TLS listeners' certificates, replaceable while serving.
    pub tls: super::tls::ClientTls,
    /// Users and permissions.
    pub acl: Arc<super::acl::Acl>,
    /// The clients in MONITOR.
    pub monitors: super::monitor::Monitors,
    /// Slow events (Redis's latency monitor).
    pub latency: super::latency::LatencyMonitor,
    /// What the command ids of `loop_stats` name.
    pub command_names: std::sync::OnceLock<super::cmdstats::CommandNames>,
    /// The leader housekeeping last saw (`u64::MAX`: none yet).
    pub last_leader: AtomicU64,
    /// Every event loop's per-command counts.
    pub loop_stats: Mutex<Vec<Arc<super::cmdstats::LoopStats>>>,
    /// Failed authentications' log lines, rate-limited.
    pub auth_failures: super::ratelimit::RateLimited,
    /// A cluster node's lock on its data directory (a single node's store
    /// holds its own): kept as long as anything serves.
    dir_lock: Mutex<Option<combkv::durable::DirLock>>,
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
    /// CONFIG SET hot-cache-entries, where a thread keeps its read results
    /// (`batch`, made with `made_with` cache slots): when the setting has
    /// changed, a new, empty cache of the new size (the old one's entries
    /// would not fit it), after what the old one counted is published.
    /// Event loops call it between turns, the memcached UDP reader between
    /// datagrams.
    pub(crate) fn fit_hot_cache(
        &self,
        batch: &mut combkv::readexec::BatchResults,
        made_with: &mut usize,
    ) {
        let entries = self.live.hot_cache_entries();
        if entries != *made_with {
            self.stats.add_hot_cache(batch);
            *batch = crate::config::read_results_for(entries);
            *made_with = entries;
        }
    }

    /// The shared state of a server whose node is still loading: `serve`
    /// it when it is open.
    pub fn new(
        config: ServerConfig,
        tls: super::tls::ClientTls,
        acl: super::acl::Acl,
    ) -> Result<Shared, String> {
        let slowlog = SlowLog::new(config.slowlog_max_len, config.slowlog_log_slower_than);
        let now = SystemTime::now();
        let loading_store =
            Arc::new(Store::new(config.engine_config()).map_err(|e| e.to_string())?);
        let used = loading_store.memory().total();
        Ok(Shared {
            node: std::sync::OnceLock::new(),
            loading_store,
            readiness: Default::default(),
            live: super::live::Live::new(&config),
            config,
            stats: Stats::default(),
            slowlog,
            started_at: Instant::now(),
            started_unix: now,
            clients: AtomicUsize::new(0),
            next_client_id: AtomicU64::new(1),
            used_memory: AtomicU64::new(used),
            startup_memory: used,
            used_memory_peak: AtomicU64::new(0),
            used_memory_rss: AtomicU64::new(resident_bytes()),
            query_buffers: AtomicUsize::new(0),
            output_buffers: AtomicUsize::new(0),
            shutting_down: AtomicBool::new(false),
            wakers: std::sync::OnceLock::new(),
            last_save_unix: AtomicU64::new(
                now.duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
            ),
            client_registry: Mutex::new(Default::default()),
            pause: Default::default(),
            scan_cursors: Mutex::new(Default::default()),
            memcache: Default::default(),
            tls,
            acl: Arc::new(acl),
            latency: Default::default(),
            monitors: Default::default(),
            last_leader: AtomicU64::new(u64::MAX),
            command_names: std::sync::OnceLock::new(),
            loop_stats: Mutex::new(Vec::new()),
            auth_failures: Default::default(),
            dir_lock: Mutex::new(None),
        })
    }

    /// A server serving `node` at once (tests, in-process embedding).
    pub fn serving(
        node: Node,
        config: ServerConfig,
        tls: super::tls::ClientTls,
        acl: super::acl::Acl,
    ) -> Result<Shared, String> {
        let shared = Shared::new(config, tls, acl)?;
        shared.serve(node);
        Ok(shared)
    }

    /// The node is open: commands run from now on (a cluster node's once
    /// it has caught up, see `readiness`).
    pub fn serve(&self, node: Node) {
        let clustered = matches!(node, Node::Cluster(_));
        if self.node.set(node).is_err() {
            return;
        }
        self.readiness.loaded(clustered);
    }

    /// The Raft node, on a cluster node that has opened it.
    pub fn cluster(&self) -> Option<&crate::cluster::Cluster> {
        match self.node.get() {
            Some(Node::Cluster(c)) => Some(c),
            _ => None,
        }
    }

    /// Holds `lock` (see `dir_lock`) as long as this lives.
    pub(crate) fn hold(&self, lock: Option<combkv::durable::DirLock>) {
        *self.dir_lock.lock() = lock;
    }

    /// Stops the server (a signal through `Stopper`, SHUTDOWN, memcached
    /// `shutdown`): every loop answers what it has, flushes and ends.
    pub fn stop(&self) {
        self.shutting_down.store(true, Ordering::Release);
        // A loop waiting in a cluster administration command (an add that
        // waits for its node) must be let go, or it never ends.
        if let Some(c) = self.cluster() {
            c.stopping();
        }
        for w in self.wakers.get().into_iter().flatten() {
            let _ = w.wake();
        }
    }

    /// The store to serve from now: a turn takes it once and keeps it (a
    /// cluster node's is replaced whole when it installs a snapshot).
    pub fn current_store(&self) -> Arc<Store> {
        match self.node.get() {
            Some(Node::Cluster(c)) => c.store(),
            Some(Node::Single(s)) => Arc::clone(s),
            None => Arc::clone(&self.loading_store),
        }
    }

    /// The keys this node holds: its store's, or on a cluster node those
    /// of every range it holds a replica of.
    pub fn keys(&self) -> u64 {
        match self.node.get() {
            Some(Node::Cluster(c)) => c.keys(),
            _ => self.current_store().len(),
        }
    }

    /// True when a write that comes in here must be refused for memory:
    /// on a single node, when it is above `maxmemory`. On a cluster node
    /// never here: the data goes where its range's leader is, and that
    /// leader refuses it on its own memory (`Cluster::set_memory_full`),
    /// whichever node it came in at, as a Redis replica leaves the limit
    /// to its master. Checked here too, a node would refuse writes that
    /// grow only other nodes. The check still brings the sample up to
    /// date, so that the gate of what this node leads follows its own
    /// clients' writes closely.
    pub fn over_maxmemory(&self) -> bool {
        let max = self.live.maxmemory();
        max != 0 && self.used_memory_now() > max && self.cluster().is_none()
    }

    /// `used_memory`, brought up to date on every `REFRESH_USED_EVERY`th
    /// call on this thread: the housekeeping thread's sample is up to
    /// 100 ms old, and a pipeline of writes adds tens of megabytes in that
    /// time. A refresh costs a few loads (`Store::memory`); a thread-local
    /// count decides, so the calls in between touch nothing shared.
    fn used_memory_now(&self) -> u64 {
        thread_local! {
            static CALLS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
        }
        let n = CALLS.with(|c| {
            let n = c.get().wrapping_add(1);
            c.set(n);
            n
        });
        if n.is_multiple_of(REFRESH_USED_EVERY) {
            self.sample_used_memory()
        } else {
            self.used_memory.load(Ordering::Relaxed)
        }
    }

    /// The largest request body (a bulk string, a memcached data block)
    /// that may still be read under `maxmemory`: half the room left, since
    /// a value is held twice while it is stored (the input buffer and the
    /// store's copy). `usize::MAX` without `maxmemory`.
    pub fn body_room(&self) -> usize {
        let max = self.live.maxmemory();
        if max == 0 {
            return usize::MAX;
        }
        let used = self.used_memory.load(Ordering::Relaxed);
        usize::try_from(max.saturating_sub(used) / 2).unwrap_or(usize::MAX)
    }

    /// Bytes of every connection's input and output buffers (INFO
    /// `mem_clients_normal`).
    pub fn client_buffers(&self) -> u64 {
        (self.query_buffers.load(Ordering::Relaxed) + self.output_buffers.load(Ordering::Relaxed))
            as u64
    }

    /// Re-reads what the store holds and the clients' buffers into
    /// `used_memory`, and returns it. The store is the one serving now: a
    /// cluster node's is replaced whole by a snapshot install, and the one
    /// it replaced is freed once its last reader lets go.
    fn sample_used_memory(&self) -> u64 {
        let stores = match self.node.get() {
            // Every range's replica here (a moved-away one too, until it
            // is deleted): each holds its memory.
            Some(Node::Cluster(c)) => c.stores_memory(),
            _ => self.current_store().memory().total(),
        };
        let used = stores + self.client_buffers();
        if let Some(Node::Cluster(c)) = self.node.get() {
            let max = self.live.maxmemory();
            c.set_memory_full(max != 0 && used > max);
        }
        self.used_memory.store(used, Ordering::Relaxed);
        self.used_memory_peak.fetch_max(used, Ordering::Relaxed);
        used
    }

    /// Samples `used_memory` and the resident set size (housekeeping).
    pub fn sample_memory(&self) {
        self.sample_used_memory();
        self.used_memory_rss
            .store(resident_bytes(), Ordering::Relaxed);
    }

    /// CONFIG RESETSTAT: zeroes the counters.
    pub fn reset_stats(&self) {
        for c in self.counters() {
            c.reset();
        }
        self.slowlog.reset();
        for l in self.loop_stats.lock().iter() {
            l.resp.reset();
            l.memcached.reset();
            l.reset_batches();
        }
    }

    /// A new event loop's per-command counts, registered for readers.
    pub fn new_loop_stats(&self) -> Arc<super::cmdstats::LoopStats> {
        let names = self.command_names.get_or_init(Default::default);
        let stats = Arc::new(super::cmdstats::LoopStats::new(names));
        self.loop_stats.lock().push(Arc::clone(&stats));
        stats
    }

    /// Every command of `memcached` (else RESP) with a call, refusal or
    /// failure, and its counts summed over the loops, in id order.
    pub fn command_totals(&self, memcached: bool) -> Vec<(&'static str, super::cmdstats::Totals)> {
        use super::cmdstats::Totals;
        let Some(names) = self.command_names.get() else {
            return Vec::new();
        };
        let names = if memcached {
            &names.memcached
        } else {
            &names.resp
        };
        let loops = self.loop_stats.lock().clone();
        let mut out = Vec::new();
        for (id, name) in names.iter().enumerate() {
            let mut t = Totals::zero();
            for l in &loops {
                let s = if memcached { &l.memcached } else { &l.resp };
                s.add_into(id, &mut t);
            }
            if t.calls + t.rejected + t.failed > 0 {
                out.push((*name, t));
            }
        }
        out
    }

    /// Error replies by code, summed over the loops.
    pub fn error_totals(&self, memcached: bool) -> std::collections::BTreeMap<String, u64> {
        let mut out = std::collections::BTreeMap::new();
        for l in self.loop_stats.lock().iter() {
            let s = if memcached { &l.memcached } else { &l.resp };
            s.errors_into(&mut out);
        }
        out
    }

    /// The server-wide counters (`Stats`).
    fn counters(&self) -> [&Counter; 21] {
        let s = &self.stats;
        [
            &s.connections_received,
            &s.connections_rejected,
            &s.commands_processed,
            &s.requests_parsed,
            &s.keyspace_hits,
            &s.keyspace_misses,
            &s.net_input_bytes,
            &s.net_output_bytes,
            &s.errors_replied,
            &s.read_batches,
            &s.read_batch_requests,
            &s.hot_cache_hits,
            &s.hot_cache_misses,
            &s.writes_refused_oom,
            &s.large_values_received,
            &s.large_values_stored_uncopied,
            &s.large_values_sent_uncopied,
            &s.protocol_errors,
            &s.output_limit_disconnections,
            &s.query_limit_disconnections,
            &s.raft_leader_changes,
        ]
    }

    pub fn uptime(&self) -> Duration {
        self.started_at.elapsed()
    }
}

/// See `Shared::used_memory_now`.
const REFRESH_USED_EVERY: u32 = 16;

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
    use nix::unistd::{SysconfVar, sysconf};
    // A failed or indeterminate answer counts as 4 KiB pages, as before.
    let page = sysconf(SysconfVar::PAGE_SIZE).ok().flatten().unwrap_or(0);
    pages * page.max(4096) as u64
}

/// CPU time (user, system) of this process, or of its waited-for children,
/// as `seconds.microseconds` (INFO's cpu section, memcached's stats).
pub fn cpu_times(children: bool) -> (String, String) {
    use nix::sys::resource::{UsageWho, getrusage};
    let who = if children {
        UsageWho::RUSAGE_CHILDREN
    } else {
        UsageWho::RUSAGE_SELF
    };
    let Ok(ru) = getrusage(who) else {
        return ("0.000000".into(), "0.000000".into());
    };
    let f = |t: nix::sys::time::TimeVal| format!("{}.{:06}", t.tv_sec(), t.tv_usec());
    (f(ru.user_time()), f(ru.system_time()))
}
