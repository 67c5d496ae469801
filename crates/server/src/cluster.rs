//! A cluster node's side of the server (`docs/cluster.md`): the Raft node
//! this process runs, and the three things the request pipeline asks of it.
//!
//! - A write is decided as an [`Op`] as on a single node, then proposed
//!   through the leader; its reply is rendered from the outcome the log
//!   gave it, once a quorum has it. Meanwhile its connection is parked
//!   and the event loop serves others (`park`); a turn's writes go as one
//!   proposal (`propose_all`).
//! - A linearizable read waits for a read index (one quorum round shared
//!   by every read waiting on any loop), then reads this node's store like
//!   any other read.
//! - Expired items are deleted by the leader's proposals (`reap`), never
//!   by a node on its own, so that every replica deletes the same ones.
//!
//! The Raft node runs on a small tokio runtime of its own; the event loops
//! are not tokio threads. A change to the cluster (membership, splits and
//! merges, a snapshot of every range, the users) runs on that runtime
//! while its connection parks (`change_then`); what must wait (the other
//! administration, reaping on the housekeeping thread, a shutdown's last
//! requests) waits with `block_on`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use combkv::op::{Op, Outcome};
use combkv::{Error as StoreError, HistogramSnapshot, Store};
use combkv_replica::{
    At, ClusterError, Host, LogOptions, RangeStats, Replica, ReplicaConfig, Routed, Status,
    SyncPolicy,
};

use crate::config::{ClusterReads, DurabilityMode, ServerConfig, StartError, parse_peers};

/// The node this server runs.
pub struct Cluster {
    /// The node's groups (one per range it holds a replica of).
    host: Host,
    /// Group 0: the cluster's membership, the range map and range 0.
    replica: Replica,
    rt: tokio::runtime::Runtime,
    reads: ClusterReads,
    /// Set when the server stops: an administration command that waits
    /// (an add waiting for its node to catch up) ends at once, so that the
    /// event loop it holds can finish and the process exit.
    stopping: tokio::sync::watch::Sender<bool>,
    /// Which ranges' replicas the read indexes taken so far covered.
    marks: Arc<parking_lot::Mutex<Marks>>,
    /// Held by the membership change in progress: a second one is refused
    /// rather than raced against the first.
    changing: Arc<tokio::sync::Mutex<()>>,
    /// Held by the change of a setting in progress: the next one waits,
    /// and decides its value from what this one put in place.
    setting: Arc<tokio::sync::Mutex<()>>,
    /// What follows each setting on this node (`on_setting`).
    followers: Arc<Followers>,
    /// The snapshots taken on this node while the keyspace is split.
    snapshots: parking_lot::Mutex<Snapshots>,
    /// Reads across ranges this node served at one timestamp, and the
    /// times one was taken again at a new timestamp (INFO `ranges`).
    reads_across: std::sync::atomic::AtomicU64,
    read_retries: std::sync::atomic::AtomicU64,
    /// Told whether the node is above `maxmemory` (`set_memory_full`): its
    /// leaders refuse writes that add data meanwhile, whichever node they
    /// came in at.
    memory: combkv_replica::MemoryGate,
    /// Writes this node's clients sent that a range's leader refused for
    /// its memory (INFO `oom_rejected_writes`, with the node's own).
    refused_for_memory: Arc<std::sync::atomic::AtomicU64>,
    /// The bound on the nodes' clock offset, and what this node's groups
    /// saw of the others' clocks (INFO `ranges`).
    clock_offset: combkv_replica::ranges::ClockOffset,
}

/// Snapshots of a keyspace split into ranges, taken on this node: each a
/// timestamp every range pinned (`Cluster::snapshot`). Like a store's,
/// their ids are this node's own, and never one a store gave: they start
/// at `SPLIT_SNAPSHOT_IDS`, so that an id taken before the keyspace split
/// does not name one taken after.
#[derive(Debug, Default)]
struct Snapshots {
    last_id: u64,
    /// Id -> (timestamp, expiry, life it was taken for).
    live: std::collections::BTreeMap<u64, (u64, std::time::Instant, std::time::Duration)>,
}

/// The first id of a snapshot of a split keyspace (a store's ids count
/// from 1 and never get near it).
const SPLIT_SNAPSHOT_IDS: u64 = 1 << 48;

impl Snapshots {
    fn prune(&mut self) {
        let now = std::time::Instant::now();
        self.live.retain(|_, (_, until, _)| *until > now);
    }
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("id", &self.replica.id())
            .field("reads", &self.reads)
            .finish()
    }
}

/// Raft's own threads (its core, replication, the network, apply): half
/// the cores, the event loops having the other half. On a small machine
/// one thread is also fastest, since every hop between two of them is a
/// thread wake.
fn raft_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get() / 2)
        .max(1)
}

impl Cluster {
    /// Opens the node's log and snapshots under the data directory and
    /// starts it. With `peers`, the node of the lowest id forms the
    /// cluster on its first start (later starts find it formed).
    pub(crate) fn start(config: &ServerConfig) -> Result<Cluster, StartError> {
        let (Some(raft_addr), Some(data_dir)) = (config.raft_addr, &config.data_dir) else {
            return Err(StartError(
                "a cluster node needs --raft-addr and --data-dir".into(),
            ));
        };
        let peers = parse_peers(&config.peers).map_err(StartError)?;
        own_entry_check(config.node_id, raft_addr, config.raft_advertise, &peers)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(raft_threads())
            .thread_name("combkv-raft")
            .enable_all()
            .build()
            .map_err(|e| StartError(format!("cannot start the Raft runtime: {e}")))?;
        let mut rc = ReplicaConfig::new(
            config.node_id,
            raft_addr,
            combkv_replica::cluster_dir(data_dir),
        );
        rc.engine = config.engine_config();
        rc.snapshot_entries = config.cluster_snapshot_entries;
        rc.snapshot_log_bytes = config.cluster_snapshot_log_bytes.0;
        rc.log_keep_entries = config.cluster_log_keep_entries;
        rc.split_bytes = config.cluster_range_split_bytes.0;
        rc.range_replicas = config.cluster_range_replicas as usize;
        rc.split_load = config.cluster_range_split_load;
        rc.merge_bytes = config.range_merge_bytes();
        rc.clock_offset = combkv_replica::ranges::ClockOffset::new(config.cluster_max_clock_offset);
        rc.node_down_after = match config.cluster_node_down_seconds {
            0 => None,
            s => Some(std::time::Duration::from_secs(s)),
        };
        rc.peer_tls = config.peer_tls_files();
        let memory = combkv_replica::MemoryGate::default();
        rc.memory = memory.clone();
        rc.log = LogOptions {
            sync: match config.durability_mode() {
                DurabilityMode::Always => SyncPolicy::Always,
                DurabilityMode::Everysec => SyncPolicy::EverySec,
                DurabilityMode::None => SyncPolicy::None,
            },
            cache_bytes: config.cluster_log_cache_bytes.0,
            ..LogOptions::default()
        };
        let host = rt
            .block_on(Host::start(&rc))
            .map_err(|e| StartError(format!("cannot start cluster node {}: {e}", rc.id)))?;
        let replica = host.group(0).expect("a started host has group 0");
        let members: Vec<(u64, String)> =
            peers.iter().map(|(id, a)| (*id, a.to_string())).collect();
        // A node that already belongs to a cluster must be told the same
        // peers it has: a contradicting list is a mistake (a typo, another
        // cluster's list) that would otherwise show only as a cluster that
        // cannot elect.
        if let Err(why) = rt.block_on(replica.check_peers(&members)) {
            rt.block_on(replica.shutdown());
            return Err(StartError(format!("cluster node {}: {why}", rc.id)));
        }
        {
            let _entered = rt.enter();
            replica.watch(members.clone());
        }
        let lowest = peers.iter().map(|(id, _)| *id).min();
        if lowest == Some(config.node_id) {
            match rt.block_on(replica.initialize(&members)) {
                Ok(()) => tracing::info!(?members, "formed a new cluster"),
                // Formed on an earlier start.
                Err(ClusterError::Refused(why)) => tracing::debug!("not forming a cluster: {why}"),
                Err(e) => return Err(StartError(format!("cannot form the cluster: {e}"))),
            }
        }
        Ok(Cluster {
            clock_offset: rc.clock_offset.clone(),
            host,
            replica,
            rt,
            reads: config.cluster_reads,
            stopping: tokio::sync::watch::Sender::new(false),
            marks: Arc::default(),
            changing: Arc::default(),
            setting: Arc::default(),
            followers: Arc::default(),
            snapshots: Default::default(),
            reads_across: Default::default(),
            read_retries: Default::default(),
            memory,
            refused_for_memory: Arc::default(),
        })
    }

    /// The store this node serves now (a snapshot install replaces it).
    pub(crate) fn store(&self) -> Arc<Store> {
        self.replica.current_store()
    }

    /// Proposes `op` through its range's group and waits for its outcome.
    pub(crate) fn apply(&self, op: &Op<'_>) -> Result<Outcome, StoreError> {
        let mut results = self.apply_all(std::slice::from_ref(op))?;
        results.pop().expect("one result per op")
    }

    /// Proposes `ops`, one entry per range they lie in, and waits for
    /// their outcomes, in order (an op whose keys lie in two ranges is
    /// answered `CrossRange`).
    pub(crate) fn apply_all(
        &self,
        ops: &[Op<'_>],
    ) -> Result<Vec<Result<Outcome, StoreError>>, StoreError> {
        Ok(self.rt.block_on(self.proposer().apply_all(ops)))
    }

    /// What work on the Raft runtime (`Change::Job`) proposes writes
    /// through.
    pub(crate) fn proposer(&self) -> Proposer {
        Proposer {
            host: self.host.clone(),
            replica: self.replica.clone(),
            refused: Arc::clone(&self.refused_for_memory),
        }
    }

    /// Adds a decided write to a turn's batch, routed by the range map as
    /// this node applied it; one whose keys lie in two ranges is answered
    /// `CrossRange` in its place.
    pub(crate) fn route(&self, batch: &mut Routed, op: &Op<'_>) {
        batch.route(|| self.shared_range_map(), op);
    }

    /// Proposes a turn's writes in the background, one entry per range
    /// they lie in (`Host::propose_routed`); `done` gets their outcomes in
    /// order, and the index of group 0's entry when they all went there
    /// (on a Raft thread: it must only hand them on).
    pub(crate) fn propose_all(
        &self,
        ops: Routed,
        done: impl FnOnce(Option<u64>, Vec<Result<Outcome, StoreError>>) + Send + 'static,
    ) {
        let now = self.replica.clock_ms();
        let host = self.host.clone();
        let refused = Arc::clone(&self.refused_for_memory);
        self.rt.spawn(async move {
            let (index, results) = host.propose_routed(now, ops).await;
            count_refused_for_memory(&refused, &results);
            done(index, results);
        });
    }

    /// Writes of this node's clients a range's leader refused for its
    /// memory.
    pub(crate) fn refused_for_memory(&self) -> u64 {
        self.refused_for_memory
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The last index this node knows committed.
    pub(crate) fn commit_index(&self) -> u64 {
        self.replica.commit_index()
    }

    /// On the leader: how many voters besides it hold the log up to
    /// `index`; None on any other node.
    pub(crate) fn replicas_at(&self, index: u64) -> Option<usize> {
        self.replica.replicas_at(index)
    }

    /// WAIT in the background: `done` gets how many voters besides the
    /// leader hold the log up to `index` once `want` do, `timeout` passed
    /// (None: no limit) or the server stops (on a Raft thread: it must
    /// only hand it on). None: this node is not (or no longer) the leader.
    pub(crate) fn wait_replicas_then(
        &self,
        index: u64,
        want: usize,
        timeout: Option<Duration>,
        done: impl FnOnce(Option<usize>) + Send + 'static,
    ) {
        let replica = self.replica.clone();
        let mut stopping = self.stopping.subscribe();
        self.rt.spawn(async move {
            let stop = async move {
                let _ = stopping.wait_for(|s| *s).await;
            };
            done(replica.wait_replicas(index, want, timeout, stop).await);
        });
    }

    /// Asks for a read index over `scope` in the background; `done` hears
    /// when reads of those ranges on this node are linearizable, with the
    /// instant it began and the scope it covered (on a Raft thread: it
    /// must only hand it on).
    pub(crate) fn read_barrier_then(
        &self,
        scope: ReadScope,
        done: impl FnOnce(Result<(Instant, ReadScope), StoreError>) + Send + 'static,
    ) {
        let (host, marks) = (self.host.clone(), Arc::clone(&self.marks));
        self.rt.spawn(async move {
            let r = read_index(&host, &marks, &scope).await;
            done(r.map(|since| (since, scope)));
        });
    }

    /// Waits until a read on this node is linearizable (with
    /// `cluster-reads linearizable`).
    pub(crate) fn read_barrier(&self) -> Result<(), StoreError> {
        self.read_barrier_over(&ReadScope::All).map(drop)
    }

    /// Waits until reads of the ranges in `scope` on this node are
    /// linearizable; the instant the read index began.
    pub(crate) fn read_barrier_over(&self, scope: &ReadScope) -> Result<Instant, StoreError> {
        if self.reads == ClusterReads::Local {
            return Ok(Instant::now());
        }
        self.rt.block_on(read_index(&self.host, &self.marks, scope))
    }

    /// Whether a read index over every range in `scope` began at or after
    /// `since` and completed (so a read of them now is linearizable for a
    /// request that arrived before `since`).
    pub(crate) fn fresh_over(&self, scope: &ReadScope, since: Instant) -> bool {
        let marks = self.marks.lock();
        match scope {
            ReadScope::All => self
                .host
                .serving_all()
                .iter()
                .all(|r| marks.covers_since(r.group(), since)),
            ReadScope::Ranges(ids) => ids.iter().all(|&id| marks.covers_since(id, since)),
        }
    }

    /// The meta group's replica here (group 0: the range map and the
    /// settings).
    pub(crate) fn meta_replica(&self) -> &Replica {
        &self.replica
    }

    /// Whether a read of `replica` is linearizable without a read index of
    /// its own, for a request whose read index began at `since` (None: one
    /// was taken, by `read_barrier`, before the request's reads began) over
    /// some of the ranges this node serves. A replica that no read index
    /// begun since then covered (outside the request's scope, or a split's
    /// new range started here after it) is not.
    pub(crate) fn is_fresh(&self, replica: &Replica, since: Option<Instant>) -> bool {
        if self.reads == ClusterReads::Local {
            return true;
        }
        let marks = self.marks.lock();
        match since {
            Some(since) => marks.covers_since(replica.group(), since),
            None => marks.covers(replica.group()),
        }
    }

    /// On the leader of each range this node holds a replica of:
    /// proposes the deletion of up to `max` expired items of it (each only
    /// if it is still the version found expired). Elsewhere nothing: the
    /// leader's deletions reach every replica through the range's log.
    pub(crate) fn reap(&self, max: usize) {
        for replica in self.host.serving_all() {
            if !replica.is_leader() {
                continue;
            }
            let expired = replica.current_store().expired_items(max);
            if expired.is_empty() {
                continue;
            }
            let ops: Vec<Op<'_>> = expired
                .iter()
                .map(|(key, version)| Op::Reap {
                    key,
                    version: *version,
                })
                .collect();
            let mut bytes = Vec::new();
            combkv_replica::codec::encode_ops(&ops, &mut bytes);
            let now = replica.clock_ms();
            // A range split meanwhile refuses what it no longer holds: the
            // new range's leader reaps those.
            if let Err(e) = self.rt.block_on(replica.write(now, bytes)) {
                tracing::debug!("reaping expired items: {e}");
            }
        }
    }

    /// What this node knows of the cluster.
    pub fn status(&self) -> Status {
        self.replica.status()
    }

    /// The range map as this node has applied it (None until the cluster
    /// is formed).
    pub fn range_map(&self) -> Option<combkv_replica::ranges::RangeMap> {
        self.replica.range_map()
    }

    /// What this node holds of the ranges and did to them.
    pub fn range_stats(&self) -> RangeStats {
        self.host.range_stats()
    }

    /// The range map this node routes by, shared as applied.
    pub fn shared_range_map(&self) -> Arc<combkv_replica::ranges::RangeMap> {
        // Group 0 kept at hand: asked on every read.
        match self.replica.shared_range_map() {
            Some(map) => map,
            None => self.host.range_map(),
        }
    }

    /// The store of every group this node hosts (a replica a move left
    /// here too, until it is deleted).
    pub(crate) fn stores(&self) -> Vec<Arc<Store>> {
        self.host
            .groups()
            .into_iter()
            .filter_map(|g| self.host.group(g))
            .map(|r| r.current_store())
            .collect()
    }

    /// The keys of the ranges this node holds a replica of.
    pub(crate) fn keys(&self) -> u64 {
        self.host
            .serving_all()
            .iter()
            .map(|r| r.current_store().len())
            .sum()
    }

    /// Tells the node's leaders whether it is above its memory limit.
    pub(crate) fn set_memory_full(&self, full: bool) {
        self.memory.set_full(full);
    }

    /// The memory of every store this node's groups hold.
    pub(crate) fn stores_memory(&self) -> u64 {
        self.stores().iter().map(|s| s.memory().total()).sum()
    }

    /// Whether the keyspace is cut into more than one range, or range 0
    /// is still carrying out the merge that left it alone (reads wait for
    /// its keys as reads of ranges do).
    pub(crate) fn is_split(&self) -> bool {
        let map = self.shared_range_map();
        map.len() > 1 || map.is_merging(0)
    }

    /// Counts a read across ranges served at one timestamp, and how many
    /// times it was taken again before it was.
    pub(crate) fn note_read_across(&self, retries: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.reads_across.fetch_add(1, Relaxed);
        self.read_retries.fetch_add(retries, Relaxed);
    }

    /// Read indexes this node's reads completed since it started, one per
    /// range (INFO `ranges_read_indexes`).
    pub(crate) fn read_index_rounds(&self) -> u64 {
        self.marks.lock().rounds
    }

    /// The most an entry's clock was seen ahead of this node's (ms, in
    /// the last minute or two), and the entries ahead by more than the
    /// bound since the node started.
    pub(crate) fn clock_ahead(&self) -> (u64, u64) {
        self.clock_offset.seen()
    }

    /// The bound on the nodes' clock offset this node applies, ms: its
    /// `cluster-max-clock-offset`, or a larger one another member
    /// published.
    pub(crate) fn clock_offset_ms(&self) -> u64 {
        self.clock_offset.bound_ms()
    }

    /// Reads across ranges served at one timestamp since the node started,
    /// and the times one was taken again.
    pub(crate) fn reads_across(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.reads_across.load(Relaxed),
            self.read_retries.load(Relaxed),
        )
    }

    /// The timestamp a read across ranges that starts now reads at: the
    /// end of the wall clock's current millisecond (see
    /// `combkv_replica::PastView`). Every write acknowledged, or seen,
    /// before now has a version at or below it.
    pub(crate) fn read_timestamp(&self) -> u64 {
        combkv_replica::ranges::read_timestamp().0
    }

    /// For a read at a timestamp, all at once: with `At::Settle`, raises
    /// the read floor of each range in `local` (replicas here) to it and
    /// waits until they have applied it; runs each `(range, reads)` of
    /// `remote` at it on a node that holds the range (after raising the
    /// floor there too, or, `At::Pinned`, where a snapshot pinned it).
    /// The remote answers, in order.
    pub(crate) fn settle_at(
        &self,
        at: At,
        local: &[Replica],
        remote: Vec<(u64, Vec<combkv_replica::RemoteRead>)>,
    ) -> Result<Settled, StoreError> {
        self.rt.block_on(settle_all(
            self.host.clone(),
            Arc::clone(&self.marks),
            at,
            local.to_vec(),
            remote,
        ))
    }

    /// [`Cluster::settle_at`] in the background, after `pause` if given:
    /// `done` gets the answer (on a Raft thread: it must only hand it on).
    pub(crate) fn settle_at_then(
        &self,
        at: At,
        local: Vec<Replica>,
        remote: Vec<(u64, Vec<combkv_replica::RemoteRead>)>,
        pause: Option<Duration>,
        done: impl FnOnce(Result<Settled, StoreError>) + Send + 'static,
    ) {
        let (host, marks) = (self.host.clone(), Arc::clone(&self.marks));
        self.rt.spawn(async move {
            if let Some(pause) = pause {
                tokio::time::sleep(pause).await;
            }
            done(settle_all(host, marks, at, local, remote).await);
        });
    }

    /// Whether a snapshot for `ttl` may be taken: no longer than
    /// `max_snapshot_age`, and fewer than `max_snapshots` live now.
    pub(crate) fn snapshot_check(&self, ttl: Duration) -> Result<(), StoreError> {
        let config = self.replica.current_store().config().clone();
        if ttl > config.max_snapshot_age {
            return Err(StoreError::SnapshotTooLong {
                max_secs: config.max_snapshot_age.as_secs(),
            });
        }
        let mut snaps = self.snapshots.lock();
        snaps.prune();
        if snaps.live.len() >= config.max_snapshots {
            return Err(StoreError::TooManySnapshots);
        }
        Ok(())
    }

    /// Records a snapshot whose timestamp `at` every range pinned for
    /// `ttl` (`Change::Snapshot`); its id, this node's own. Refused, the
    /// pins released, if `max_snapshots` filled while it was taken.
    pub(crate) fn add_snapshot(&self, at: u64, ttl: Duration) -> Result<u64, StoreError> {
        let max = self.replica.current_store().config().max_snapshots;
        let mut snaps = self.snapshots.lock();
        snaps.prune();
        if snaps.live.len() >= max {
            drop(snaps);
            self.release_pins(at, ttl);
            return Err(StoreError::TooManySnapshots);
        }
        snaps.last_id += 1;
        let id = SPLIT_SNAPSHOT_IDS + snaps.last_id;
        snaps
            .live
            .insert(id, (at, std::time::Instant::now() + ttl, ttl));
        Ok(id)
    }

    /// The timestamp of live snapshot `id` (see [`Cluster::snapshot`]).
    pub(crate) fn snapshot_at(&self, id: u64) -> Result<u64, StoreError> {
        let mut snaps = self.snapshots.lock();
        snaps.prune();
        snaps
            .live
            .get(&id)
            .map(|(at, _, _)| *at)
            .ok_or(StoreError::NoSuchSnapshot)
    }

    /// Ends snapshot `id` here, and its ranges' pins (`Host::release`);
    /// false if it was not live.
    pub(crate) fn release_snapshot(&self, id: u64) -> bool {
        let released = {
            let mut snaps = self.snapshots.lock();
            snaps.prune();
            snaps.live.remove(&id)
        };
        let Some((at, _, ttl)) = released else {
            return false;
        };
        self.release_pins(at, ttl);
        true
    }

    /// The ranges drop their pins of timestamp `at` in the background:
    /// the snapshot is gone for this node's clients at once, and a range
    /// that cannot be told now lets its pin lapse at the snapshot's end.
    fn release_pins(&self, at: u64, ttl: Duration) {
        let host = self.host.clone();
        self.rt.spawn(async move {
            let failed = host.release(at, ttl).await;
            if failed > 0 {
                tracing::info!(
                    "snapshot at {at} released; {failed} ranges keep their pins of it until its end"
                );
            }
        });
    }

    /// The live snapshots: id, timestamp, time left.
    pub(crate) fn list_snapshots(&self) -> Vec<combkv::SnapshotInfo> {
        let mut snaps = self.snapshots.lock();
        snaps.prune();
        let now = std::time::Instant::now();
        snaps
            .live
            .iter()
            .map(|(&id, &(at, until, _))| combkv::SnapshotInfo {
                id: combkv::SnapshotId(id),
                version: combkv::Version(at),
                left: until.saturating_duration_since(now),
            })
            .collect()
    }

    /// The longest key this node's stores take (every store alike).
    pub(crate) fn max_key_len(&self) -> usize {
        self.replica.current_store().max_key_len()
    }

    /// The replica here whose own bounds hold `key` (see `Host::holding`).
    pub fn replica_holding(&self, key: &[u8]) -> Option<Replica> {
        self.host.holding(key)
    }

    /// This node's replica of range `range`, if the map names one here.
    pub fn range_replica(&self, range: u64) -> Option<Replica> {
        self.host.serving(range)
    }

    /// How long this node's proposals (one per event-loop turn's writes,
    /// or one blocking write) took to be answered.
    pub fn proposal_durations(&self) -> HistogramSnapshot {
        self.replica.proposal_durations()
    }

    /// How long each fsync of this node's Raft log took.
    pub fn log_fsync_durations(&self) -> HistogramSnapshot {
        self.replica.log_fsync_durations()
    }

    /// Sets a cluster setting on every node through the log, and waits
    /// until it commits.
    pub(crate) fn set_setting(&self, name: &str, value: &[u8]) -> Result<(), StoreError> {
        self.rt
            .block_on(self.replica.set_setting(name, value))
            .map_err(cluster_error)
    }

    /// The value of cluster setting `name` as this node has applied it.
    pub(crate) fn setting(&self, name: &str) -> Option<Vec<u8>> {
        self.replica.setting(name)
    }

    /// Calls `f` with the value of the setting `name` as this node applies
    /// it (from the log or a snapshot; at once if it already has one), on
    /// a Raft thread; and when this node's own change of it commits
    /// (`Change::Setting`), so that its client sees the change at once.
    pub(crate) fn on_setting(&self, name: &'static str, f: impl Fn(&[u8]) + Send + Sync + 'static) {
        self.followers.0.lock().insert(name, Box::new(f));
        let mut rx = self.replica.settings();
        let (followers, replica) = (Arc::clone(&self.followers), self.replica.clone());
        self.rt.spawn(async move {
            let mut last: Option<Vec<u8>> = None;
            loop {
                let now = rx.borrow_and_update().get(name).cloned();
                if now.is_some() && now != last {
                    followers.follow(&replica, name);
                    last = now;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        });
    }

    /// Reads the peer TLS files again (see `Replica::reload_peer_tls`).
    pub(crate) fn reload_peer_tls(&self) -> Result<bool, String> {
        self.replica.reload_peer_tls()
    }

    /// This node's id.
    pub fn id(&self) -> u64 {
        self.replica.id()
    }

    /// Why this node serves nothing more, if its cluster removed it.
    pub(crate) fn removed(&self) -> Option<String> {
        self.replica.removed()
    }

    /// How reads are served.
    pub fn reads(&self) -> ClusterReads {
        self.reads
    }

    /// Carries out an administration command's `change` and waits for it
    /// (while the event loop drains at shutdown, where it cannot park).
    pub(crate) fn change(&self, change: Change) -> Changed {
        self.rt.block_on(self.change_task(change))
    }

    /// [`Cluster::change`] in the background: `done` gets the answer (on
    /// a Raft thread: it must only hand it on). The event loop the
    /// command came in on serves its other clients meanwhile: an add
    /// waits for its node to catch up for up to its timeout.
    pub(crate) fn change_then(&self, change: Change, done: impl FnOnce(Changed) + Send + 'static) {
        let task = self.change_task(change);
        self.rt.spawn(async move { done(task.await) });
    }

    /// What carrying out `change` takes; the right to change the
    /// membership or the range map is taken now, so that of two changes
    /// asked at once the second is refused rather than raced against the
    /// first, and held until the change ends.
    fn change_task(&self, change: Change) -> impl Future<Output = Changed> + Send + 'static {
        let changing = match change {
            // Forming a cluster changes nothing another change could race,
            // nor does a snapshot; settings wait their turn (below).
            Change::Init(_) | Change::Snapshot { .. } | Change::Setting { .. } | Change::Job(_) => {
                None
            }
            _ => Some(Arc::clone(&self.changing).try_lock_owned()),
        };
        let (setting, followers) = (Arc::clone(&self.setting), Arc::clone(&self.followers));
        let (host, replica) = (self.host.clone(), self.replica.clone());
        let mut stopping = self.stopping.subscribe();
        async move {
            let _changing = match changing {
                Some(Err(_)) => {
                    return Err(ClusterError::Refused(
                        "another membership change is in progress on this node".into(),
                    ));
                }
                other => other,
            };
            match change {
                Change::Init(members) => replica.initialize(&members).await.map(|()| None),
                Change::Add { id, addr, within } => {
                    // Ends early, the learner removed again, when the
                    // server stops.
                    let stop = async move {
                        let _ = stopping.wait_for(|s| *s).await;
                    };
                    replica
                        .add_node(id, &addr, within, stop)
                        .await
                        .map(|()| None)
                }
                Change::Remove(id) => replica.remove_node(id).await.map(|()| None),
                Change::Split { key, force } => host.split_at(&key, pinned(force)).await.map(Some),
                Change::Merge { key, force } => host.merge_at(&key, pinned(force)).await.map(Some),
                Change::Snapshot { ttl } => host.snapshot(ttl).await.map(Some),
                Change::Job(job) => job.await,
                Change::Setting { name, decide } => {
                    // Decided from the value the log holds (everything
                    // committed before is applied here after a read
                    // index), and applied only if the log still holds it
                    // then: of two changes made at once, through this node
                    // or another, neither undoes the other; the one that
                    // lost is decided again from the value that won. This
                    // node's changes take turns, so they do not lose to
                    // one another.
                    let _turn = setting.lock_owned().await;
                    let deadline = Instant::now() + SETTING_TRYING;
                    replica.read_barrier().await?;
                    let mut tries = 0;
                    while Instant::now() < deadline {
                        tries += 1;
                        let base = replica.setting(name);
                        let (value, answer) =
                            decide(base.as_deref()).map_err(ClusterError::Refused)?;
                        if replica
                            .set_setting_if(name, base.as_deref(), &value)
                            .await?
                        {
                            followers.follow(&replica, name);
                            return Ok(answer);
                        }
                    }
                    Err(ClusterError::Refused(format!(
                        "the {name} setting changed under each of {tries} tries in {} s \
                         (other nodes changing it); try again",
                        SETTING_TRYING.as_secs()
                    )))
                }
            }
        }
    }

    /// The server is stopping: an administration command that waits ends.
    pub(crate) fn stopping(&self) {
        self.stopping.send_replace(true);
    }

    /// Stops the Raft node (at server shutdown).
    pub(crate) fn shutdown(&self) {
        let _ = self.rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), self.replica.shutdown()).await
        });
    }
}

/// [`Cluster::apply_all`], awaited: for work already on the Raft runtime.
#[derive(Clone)]
pub(crate) struct Proposer {
    host: Host,
    replica: Replica,
    refused: Arc<std::sync::atomic::AtomicU64>,
}

impl Proposer {
    /// Proposes `ops`, one entry per range they lie in (routed by the
    /// range map as this node applied it), and gives their outcomes, in
    /// order.
    pub(crate) async fn apply_all(&self, ops: &[Op<'_>]) -> Vec<Result<Outcome, StoreError>> {
        let map = match self.replica.shared_range_map() {
            Some(map) => map,
            None => self.host.range_map(),
        };
        let mut routed = Routed::default();
        for op in ops {
            routed.push_or_refuse(&map, op);
        }
        let now = self.replica.clock_ms();
        let (_, results) = self.host.propose_routed(now, routed).await;
        count_refused_for_memory(&self.refused, &results);
        results
    }
}

/// A change an administration command asks of the cluster (`CLUSTER
/// INIT`, `ADD`, `REMOVE`, `SPLIT`, `MERGE`; `SNAPSHOT CREATE` of a
/// keyspace split into ranges; ACL SETUSER, DELUSER and LOAD).
pub(crate) enum Change {
    /// Forms a new cluster of these members (id, Raft address), this node
    /// one.
    Init(Vec<(u64, String)>),
    /// On the leader: adds node `id` at `addr`, a learner that must catch
    /// up `within`, then a voter (`Replica::add_node`).
    Add {
        id: u64,
        addr: String,
        within: Duration,
    },
    /// On the leader: removes node `id`.
    Remove(u64),
    /// Splits the range holding `key` at it: `key` starts a new range,
    /// whose id is the answer once the map records it (the range's leader
    /// then splits its group, `Host::split`). Refused if `key` already
    /// starts a range, and, unless `force`, while a snapshot pins it.
    Split { key: Vec<u8>, force: bool },
    /// Merges the range holding `key` with the range after it (both on
    /// the same nodes); the answer is the id of the range merged away,
    /// once the map records the merge (the left range's leader then
    /// carries it out, `Host::merge`). Refused, unless `force`, while a
    /// snapshot pins either range.
    Merge { key: Vec<u8>, force: bool },
    /// A snapshot of the keyspace split into ranges, for `ttl`: a
    /// timestamp every range raises its floor to and pins on its
    /// replicas (`Host::snapshot`), the answer
    /// ([`Cluster::add_snapshot`] records it).
    Snapshot { ttl: Duration },
    /// Changes cluster setting `name` through the log, one such change of
    /// this node at a time: `decide` makes the new value, and the
    /// command's answer, from the value the log holds when its turn comes
    /// (an error refuses the change), and again if another node's change
    /// came first. Every node follows the setting as it applies the entry
    /// (`Cluster::on_setting`); this one also before the command is
    /// answered.
    Setting {
        name: &'static str,
        decide: SettingDecision,
    },
    /// Work of a command above this layer that waits on the log (a backup
    /// loaded, batch by batch), run on the Raft runtime as the other
    /// changes are.
    Job(std::pin::Pin<Box<dyn Future<Output = Changed> + Send>>),
}

/// What [`Change::Setting`] decides from the setting's value in the log
/// (None: it holds none yet): the new value and the command's answer. It
/// may be asked again, from a newer value, if another change came first.
pub(crate) type SettingDecision =
    Box<dyn Fn(Option<&[u8]>) -> Result<(Vec<u8>, Option<u64>), String> + Send>;

/// How long a [`Change::Setting`] is decided again while other changes
/// come first, before it is refused. A count would not do: a node whose
/// changes are forwarded loses every race to a busy leader's own.
const SETTING_TRYING: Duration = Duration::from_secs(10);

/// What follows each cluster setting on this node, by name
/// ([`Cluster::on_setting`]).
#[derive(Default)]
struct Followers(parking_lot::Mutex<std::collections::HashMap<&'static str, Follower>>);

type Follower = Box<dyn Fn(&[u8]) + Send + Sync>;

impl Followers {
    /// Hands setting `name`'s follower the newest value `replica` has
    /// applied. Under one lock, and always the newest: the follower of
    /// the log and a change's own answer both come here, and whichever
    /// runs last leaves the newest value in place (handing over the value
    /// a change committed could undo a newer one handed over just before).
    fn follow(&self, replica: &Replica, name: &str) {
        let followers = self.0.lock();
        if let (Some(f), Some(v)) = (followers.get(name), replica.setting(name)) {
            f(&v);
        }
    }
}

/// A [`Change`]'s answer: the range id a split made or a merge took
/// away, the timestamp a snapshot pinned, or a setting's answer.
pub(crate) type Changed = Result<Option<u64>, ClusterError>;

/// What a request's reads were let through on: when the read index it
/// waited for began (after every request of its input arrived), and
/// whether it covered every range this node served.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadMark {
    pub since: Instant,
    pub all: bool,
}

/// Which ranges a request's read index must cover: the local ranges its
/// reads go to at their read index. A read of a range held elsewhere (the
/// node holding it takes a read index of its own) or across ranges (read at
/// one timestamp) needs none here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReadScope {
    /// Every range this node serves (reads whose keys are not known before
    /// they run, and a keyspace not split).
    All,
    /// These ranges (group ids); none: the reads need no read index here.
    Ranges(SmallVec<[u64; 4]>),
}

impl ReadScope {
    /// No range at all.
    pub(crate) fn none() -> ReadScope {
        ReadScope::Ranges(SmallVec::new())
    }

    pub(crate) fn is_none(&self) -> bool {
        matches!(self, ReadScope::Ranges(ids) if ids.is_empty())
    }

    /// Widens this scope to cover `other` too.
    pub(crate) fn join(&mut self, other: &ReadScope) {
        match (&mut *self, other) {
            (ReadScope::All, _) => {}
            (_, ReadScope::All) => *self = ReadScope::All,
            (ReadScope::Ranges(mine), ReadScope::Ranges(theirs)) => {
                for id in theirs {
                    if !mine.contains(id) {
                        mine.push(*id);
                    }
                }
            }
        }
    }

    /// Whether every range of `other` is in this scope.
    pub(crate) fn contains(&self, other: &ReadScope) -> bool {
        match (self, other) {
            (ReadScope::All, _) => true,
            (ReadScope::Ranges(_), ReadScope::All) => false,
            (ReadScope::Ranges(mine), ReadScope::Ranges(theirs)) => {
                theirs.iter().all(|id| mine.contains(id))
            }
        }
    }
}

/// When read indexes began, per range the latest one that covered it, and
/// the latest one completed over any ranges. A read index covering range
/// `r` that began at or after instant `s` and completed makes a read of `r`
/// linearizable for every request that arrived before `s`
/// (`Cluster::is_fresh`).
#[derive(Debug, Default)]
struct Marks {
    latest: Option<Instant>,
    per_range: std::collections::HashMap<u64, Instant>,
    /// Read indexes completed for reads on this node, one per range.
    rounds: u64,
}

impl Marks {
    /// For a request whose read index (over every range) completed before
    /// this: its read index began no later than the latest completed, so
    /// a range covered by one begun at or after that is fresh for it.
    fn covers(&self, range: u64) -> bool {
        self.latest
            .is_some_and(|latest| self.covers_since(range, latest))
    }

    fn covers_since(&self, range: u64, since: Instant) -> bool {
        self.per_range.get(&range).is_some_and(|at| *at >= since)
    }

    fn covered(&mut self, range: u64, start: Instant) {
        let at = self.per_range.entry(range).or_insert(start);
        *at = (*at).max(start);
        self.rounds += 1;
    }
}

/// Waits for a read index on every range in `scope` this node holds a
/// replica of, all at once: a read of any of them after it is linearizable
/// for a request that arrived before it began (the instant returned). One
/// range (a keyspace not split) waits for its own, as a one-group cluster
/// does.
async fn read_index(
    host: &Host,
    marks: &parking_lot::Mutex<Marks>,
    scope: &ReadScope,
) -> Result<Instant, StoreError> {
    let start = Instant::now();
    let mut replicas = host.serving_all();
    if let ReadScope::Ranges(ids) = scope {
        replicas.retain(|r| ids.contains(&r.group()));
    }
    // Each range's read index counts once it completes, whatever the
    // others do: a request retried after one failed finds the rest fresh.
    let result = if let [one] = replicas.as_slice() {
        let r = one.read_barrier().await.map_err(cluster_error);
        if r.is_ok() {
            marks.lock().covered(one.group(), start);
        }
        r
    } else {
        let mut tasks = tokio::task::JoinSet::new();
        for r in replicas {
            tasks.spawn(async move { (r.group(), r.read_barrier().await) });
        }
        let mut result = Ok(());
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((g, Ok(()))) => marks.lock().covered(g, start),
                Ok((_, Err(e))) => result = Err(cluster_error(e)),
                Err(e) => {
                    result = Err(StoreError::Unavailable(format!("a read index task: {e}")));
                }
            }
        }
        result
    };
    result?;
    if *scope == ReadScope::All {
        let mut m = marks.lock();
        m.latest = Some(m.latest.map_or(start, |l| l.max(start)));
    }
    Ok(start)
}

fn cluster_error(e: ClusterError) -> StoreError {
    e.into()
}

/// A failed read at another node, or at a timestamp: one a node refused
/// because its held past does not reach back to the timestamp stays that
/// (the read is taken again at a new one), as does one whose map is behind
/// (the map is brought up to date and the read routed again).
fn settle_error(e: ClusterError) -> StoreError {
    let why = e.to_string();
    if why.contains(combkv_replica::PAST_GONE) {
        StoreError::Unavailable(combkv_replica::PAST_GONE.into())
    } else if why.contains("range map has changed") {
        StoreError::WrongRange(why)
    } else {
        cluster_error(e)
    }
}

/// The remote answers of [`Cluster::settle_at`]: per `(range, reads)`, per
/// read, its items.
pub(crate) type Settled = Vec<Vec<Vec<combkv_replica::RemoteItem>>>;

/// [`Cluster::settle_at`]'s work, on the node's runtime.
async fn settle_all(
    host: Host,
    marks: Arc<parking_lot::Mutex<Marks>>,
    at: At,
    local: Vec<Replica>,
    remote: Vec<(u64, Vec<combkv_replica::RemoteRead>)>,
) -> Result<Settled, StoreError> {
    // `Settle`: each local replica's floor raised to the timestamp; `Now`:
    // a read index on each, marked covered for later reads
    // (`Cluster::is_fresh`; the range map's catch-up asks it of the meta
    // group); `Pinned`: nothing asked of them.
    let settles: Vec<_> = match at {
        At::Settle(t) => local
            .into_iter()
            .map(|r| tokio::spawn(async move { r.settle_at(t).await }))
            .collect(),
        At::Now => local
            .into_iter()
            .map(|r| {
                let marks = Arc::clone(&marks);
                tokio::spawn(async move {
                    // Its mark spares later reads here a read index of
                    // their own.
                    let start = Instant::now();
                    r.read_barrier().await?;
                    marks.lock().covered(r.group(), start);
                    Ok(())
                })
            })
            .collect(),
        At::Pinned(_) => Vec::new(),
    };
    let reads: Vec<_> = remote
        .into_iter()
        .map(|(range, reads)| {
            let host = host.clone();
            tokio::spawn(async move { host.read_remote(range, reads, at).await })
        })
        .collect();
    let stopped = |_| StoreError::Unavailable("the node is stopping".into());
    for s in settles {
        s.await.map_err(stopped)?.map_err(settle_error)?;
    }
    let mut out = Vec::with_capacity(reads.len());
    for r in reads {
        out.push(r.await.map_err(stopped)?.map_err(settle_error)?);
    }
    Ok(out)
}

/// A node's own entry in `--peers` is where the others send to it: it must
/// be its `--raft-addr` (or `--raft-advertise`, where a proxy or NAT stands
/// between), or the others would send its traffic elsewhere.
fn own_entry_check(
    id: u64,
    raft_addr: std::net::SocketAddr,
    advertise: Option<std::net::SocketAddr>,
    peers: &[(u64, std::net::SocketAddr)],
) -> Result<(), StartError> {
    let (reached_at, flag) = match advertise {
        Some(a) => (a, "--raft-advertise"),
        None => (raft_addr, "--raft-addr"),
    };
    match peers.iter().find(|(p, _)| *p == id) {
        Some((_, listed)) if *listed != reached_at => Err(StartError(format!(
            "--peers has this node (id {id}) at {listed}, but its {flag} is {reached_at}: \
             the other nodes would send to {listed}; give both the same address"
        ))),
        _ => Ok(()),
    }
}

/// Counts the writes of `results` a range's leader refused for its memory.
fn count_refused_for_memory(
    count: &std::sync::atomic::AtomicU64,
    results: &[Result<Outcome, StoreError>],
) {
    let n = results
        .iter()
        .filter(|r| matches!(r, Err(StoreError::NoMemory)))
        .count();
    if n > 0 {
        count.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What a split or merge with (or without) FORCE does while a snapshot
/// pins the ranges.
fn pinned(force: bool) -> combkv_replica::Pinned {
    match force {
        true => combkv_replica::Pinned::Force,
        false => combkv_replica::Pinned::Refuse,
    }
}
