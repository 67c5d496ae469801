//! A node's Raft groups behind its one address. A node hosts one group per
//! range it holds a replica of; they share the node's listener, its
//! connections to each peer (a request names its group, `rpc::Request::
//! ToGroup`) and its peer TLS. Each group is a [`Replica`] of its own: its
//! log, state machine, elections and clients' requests.
//!
//! Groups made by a split start here: every replica of the splitting
//! group seeds the new group's directory from its copy of the right half
//! as the split entry applies (`state_machine::seed_split_group`), and the
//! host starts it. A replica that missed the split (it caught up from a
//! snapshot taken after it) hears of the new group from its leader: a
//! message for a group the node does not host, but which the range map
//! names with a replica on this node, starts an empty replica of it, which
//! the leader then sends a snapshot.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};

use crate::error::{ClusterError, StartError};
use crate::network::tls::{PeerGuard, PeerTlsFiles};
use crate::network::{BoxFuture, GroupTransport, Handler, Transport};
use crate::node::ReplicaConfig;
use crate::ranges::{MapChange, RangeId, RangeMap};
use crate::replica::Replica;
use crate::rpc::{Request, Response};
use crate::state_machine::{SplitChild, SplitHook, seed_split_group};
use crate::types::{GroupId, NodeId};

mod drivers;
mod leaders;
mod merges;
mod remote;
mod scheduler;

/// The suffix of a deleted group's directory, renamed aside.
const REMOVING: &str = ".removing";
/// The suffix of the empty file a deleted group leaves in its place, so
/// that its parent's split, applied again from the parent's log after a
/// restart, does not seed and start it again (group ids are never used
/// twice). A leader's message still starts an empty replica of it, should
/// the map place the range here again.
const GONE: &str = ".gone";
mod router;

pub use router::{Routed, route_op};

/// The groups one node hosts, and what they share.
#[derive(Debug, Clone)]
pub struct Host(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    id: NodeId,
    groups: RwLock<HashMap<GroupId, Replica>>,
    transport: Arc<dyn Transport>,
    guard: Arc<PeerGuard>,
    /// Group 0's configuration, once it started: the one groups made by
    /// splits take, each in its own directory.
    template: Mutex<Option<ReplicaConfig>>,
    /// One group starts at a time (a split and a message for the new group
    /// may both start it).
    starting: tokio::sync::Mutex<()>,
    /// Groups whose directory is being written: seeded by a split's apply,
    /// or made by a start on a peer's message. Each claims the group
    /// first, so that neither writes the directory under the other (a seed
    /// renamed over a directory a replica has just made, or a replica
    /// started in a seed's place); the one that finds it claimed leaves it.
    claimed: Mutex<std::collections::HashSet<GroupId>>,
    /// Groups a split seeded here and not started yet: what the past of
    /// each starts from (`ReplicaConfig::split_seed`).
    split_seeds: Mutex<HashMap<GroupId, crate::node::SplitSeed>>,
    /// What this node's groups did to ranges since it started.
    counts: Counts,
    /// When this node, leading the meta group, last had a leadership
    /// handed over (the next waits until that one has settled).
    /// (tokio's clock, which a simulation runs.)
    last_leader_move: Mutex<Option<tokio::time::Instant>>,
    /// When each member last answered this node while it leads the meta
    /// group (None while it does not: a new leader starts afresh).
    last_seen: Mutex<Option<HashMap<NodeId, tokio::time::Instant>>>,
    /// Members that hung up on [`Request::Held`] (a build from before it),
    /// asked [`Request::Leading`] instead until then.
    held_unknown: Mutex<HashMap<NodeId, tokio::time::Instant>>,
    /// Members that hung up on [`Request::Loads`] (a build from before
    /// it): no leadership moves by load until then.
    loads_unknown: Mutex<HashMap<NodeId, tokio::time::Instant>>,
    /// Set once this node has learned it was removed from the cluster
    /// (`drop_moved_away`): it starts no range replica on a peer's message
    /// any more. Its map may still name it (it never applied its removal),
    /// and a replica started again, the leader it was, would take its
    /// range's lead back for a moment each time and keep the others from
    /// electing a leader that carries out the map's replacement.
    left_cluster: std::sync::atomic::AtomicBool,
    /// The step this node's drivers are in, and since when (tokio's
    /// clock): one that never ends holds every later one up.
    driving: Mutex<(&'static str, tokio::time::Instant)>,
}

/// What a split or a merge does while a snapshot pins the ranges it
/// changes ([`Host::split`], [`Host::merge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pinned {
    /// Refuse it, changing nothing: the snapshot reads every key.
    Refuse,
    /// Carry it out all the same: a range split off takes the pins, and
    /// is read at the snapshot from the store it was split from (held
    /// until the snapshot ends); a merged range is a new store that holds
    /// none of the snapshot's past, and the snapshot's reads of it are
    /// refused from then on, never answered from a part of the range.
    Force,
}

/// Counts of what a node's groups did to ranges since it started.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    /// Splits applied by this node's replicas (every replica of a range
    /// applies each of its splits).
    pub(crate) splits: AtomicU64,
    /// Replicas this node's range leaders added to their groups.
    pub(crate) added: AtomicU64,
    /// Replicas this node's range leaders removed from their groups.
    pub(crate) removed: AtomicU64,
    /// Replicas of this node deleted after a move took the range away.
    pub(crate) deleted: AtomicU64,
    /// Leaderships this node, leading the meta group, had handed over.
    pub(crate) leaders_moved: AtomicU64,
    /// Merges this node's range leaders carried out (a retired range's
    /// keys absorbed).
    pub(crate) merges: AtomicU64,
}

/// A node's ranges, as INFO and the metrics show them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeStats {
    /// Ranges in the map.
    pub ranges: u64,
    /// Ranges the map names a replica of on this node, started here.
    pub hosted: u64,
    /// Of those, the ones this node leads.
    pub leading: u64,
    /// Replicas here the map no longer names (moved away, to be deleted).
    pub stale: u64,
    /// Keys in the replicas this node hosts.
    pub keys: u64,
    /// Bytes of keys and values in the replicas this node hosts.
    pub bytes: u64,
    /// Splits applied by this node's replicas since it started.
    pub splits: u64,
    /// Merges this node's range leaders carried out since it started.
    pub merges: u64,
    /// Replicas this node's range leaders added since it started.
    pub replicas_added: u64,
    /// Replicas this node's range leaders removed since it started.
    pub replicas_removed: u64,
    /// Replicas of this node deleted after moves, since it started.
    pub replicas_deleted: u64,
    /// Leaderships of ranges this node had handed to another voter (as
    /// the meta group's leader, balancing leaders) since it started.
    pub leaders_moved: u64,
    /// Snapshots' timestamps pinned on this node's replicas now (one per
    /// snapshot and replica).
    pub snapshot_pins: u64,
    /// Raft snapshots this node's replicas are sending and receiving now,
    /// and sent and received whole since they started.
    pub snapshots: crate::transfers::TransferCounts,
}

/// Hands each request that reaches the node to the group it names. It
/// keeps the host alive while the listener (or the simulated network)
/// serves it.
struct Dispatch(Arc<Inner>);

impl Handler for Dispatch {
    fn handle(&self, req: Request) -> BoxFuture<'_, Response> {
        Box::pin(async move {
            let host = Host(Arc::clone(&self.0));
            let (group, req) = match req {
                Request::ToGroup(g, inner) => (g, *inner),
                Request::Leading => return Response::Leading(host.leading()),
                Request::Held => return Response::Held(host.held_ranges()),
                Request::Loads => return Response::Loads(host.led_loads()),
                bare => (0, bare),
            };
            let mut replica = host.group(group);
            // A group made by a split that this node has not started (it
            // missed the split): its leader's messages start it.
            if replica.is_none()
                && matches!(
                    req,
                    Request::Append(_) | Request::Vote(_) | Request::Snapshot(_)
                )
                && host.expects(group)
            {
                replica = host.start_on_message(group).await;
            }
            match replica {
                Some(r) => r.handle(req).await,
                None => Response::NoSuchGroup(group),
            }
        })
    }
}

/// Each cluster member's Raft address, as the meta group (`meta`) has
/// applied its membership: where a node sends to the others' groups.
fn member_addrs(meta: &Replica) -> HashMap<NodeId, String> {
    meta.status()
        .nodes
        .into_iter()
        .map(|(id, addr, _)| (id, addr))
        .collect()
}

/// How long a node waits for another's answer to what it asks on its own
/// account (a range's members, bytes or pins, which ranges a node leads,
/// a hand-over): one that has not answered by then counts as down this
/// time, and is asked again at the next turn.
const ASK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// [`ASK_TIMEOUT`] for a node asking whether it is still a member of a
/// range (`drop_moved_away`): an answer that does not come in time keeps
/// the replica, stopped just before, and starts it again, so it is given
/// longer.
const MEMBER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

impl Host {
    /// Asks `req` of group `group`'s replicas on the nodes `ask`, one
    /// after another (this node, and any the meta group names no address
    /// of, left out), each for up to `timeout`, until an answer gives
    /// `take` a value.
    async fn ask_in_turn<T>(
        &self,
        group: GroupId,
        ask: &[NodeId],
        timeout: std::time::Duration,
        req: impl Fn() -> Request,
        mut take: impl FnMut(Response) -> Option<T>,
    ) -> Option<T> {
        let addrs = member_addrs(&self.group(0)?);
        for &v in ask.iter().filter(|&&v| v != self.0.id) {
            let Some(addr) = addrs.get(&v) else { continue };
            let req = Request::for_group(group, req());
            if let Ok(answer) = self.0.transport.call(v, addr, req, timeout).await
                && let Some(found) = take(answer)
            {
                return Some(found);
            }
        }
        None
    }
}

impl Host {
    fn new(id: NodeId, transport: Arc<dyn Transport>, guard: Arc<PeerGuard>) -> Host {
        Host(Arc::new(Inner {
            id,
            groups: RwLock::default(),
            transport,
            guard,
            template: Mutex::new(None),
            starting: tokio::sync::Mutex::new(()),
            claimed: Mutex::default(),
            split_seeds: Mutex::default(),
            counts: Counts::default(),
            last_leader_move: Mutex::new(None),
            driving: Mutex::new(("starting", tokio::time::Instant::now())),
            last_seen: Mutex::new(None),
            held_unknown: Mutex::default(),
            loads_unknown: Mutex::default(),
            left_cluster: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    fn dispatch(&self) -> Arc<dyn Handler> {
        Arc::new(Dispatch(Arc::clone(&self.0)))
    }

    /// A node `id` that talks TCP: binds `raft_addr` (sending from its IP)
    /// and serves its groups' peers there, with mutual TLS when `peer_tls`
    /// names the files. Runs inside the current tokio runtime.
    pub async fn bind(
        id: NodeId,
        raft_addr: SocketAddr,
        peer_tls: Option<PeerTlsFiles>,
    ) -> Result<Host, StartError> {
        let guard = Arc::new(PeerGuard::new(peer_tls).map_err(StartError::Config)?);
        let listener = tokio::net::TcpListener::bind(raft_addr)
            .await
            .map_err(|e| {
                StartError::Io(std::io::Error::new(
                    e.kind(),
                    format!("cannot listen on the Raft address {raft_addr}: {e}"),
                ))
            })?;
        let transport = Arc::new(crate::network::tcp::TcpTransport::new(
            Some(raft_addr.ip()),
            Arc::clone(&guard),
        ));
        let host = Host::new(id, transport, Arc::clone(&guard));
        tokio::spawn(crate::network::tcp::serve(listener, host.dispatch(), guard));
        host.spawn_drivers();
        Ok(host)
    }

    /// A node `id` on a simulated network (tests); it replaces whatever
    /// answered for `id` there before (a restart).
    pub fn simulated(id: NodeId, net: &crate::network::sim::SimNet) -> Host {
        let host = Host::new(id, net.transport(id), Arc::new(PeerGuard::default()));
        net.register(id, host.dispatch());
        host.spawn_drivers();
        host
    }

    /// Starts this node's replica of `group`, set up by `config` (its own
    /// directory; `config.id` must be this node's). Refused if the node
    /// hosts that group already. Group 0's configuration is the one the
    /// groups its splits make take.
    pub async fn start_group(
        &self,
        group: GroupId,
        config: &ReplicaConfig,
    ) -> Result<Replica, StartError> {
        let _one = self.0.starting.lock().await;
        self.start_locked(group, config).await
    }

    async fn start_locked(
        &self,
        group: GroupId,
        config: &ReplicaConfig,
    ) -> Result<Replica, StartError> {
        if config.id != self.0.id {
            return Err(StartError::Config(format!(
                "group {group} is set up for node {}, on node {}",
                config.id, self.0.id
            )));
        }
        if self.0.groups.read().contains_key(&group) {
            return Err(StartError::Config(format!(
                "node {} hosts group {group} already",
                self.0.id
            )));
        }
        let mut config = config.clone();
        config.on_split = Some(self.split_hook(&config));
        config.split_seed = self.0.split_seeds.lock().remove(&group);
        if group == 0 {
            *self.0.template.lock() = Some(config.clone());
        }
        let transport = Arc::new(GroupTransport::new(group, Arc::clone(&self.0.transport)));
        let replica =
            Replica::start_with(&config, group, transport, Arc::clone(&self.0.guard)).await?;
        self.0.groups.write().insert(group, replica.clone());
        Ok(replica)
    }

    /// The replica of `group`, started from its directory (or empty) if
    /// the node does not host it yet; none before group 0 has started.
    async fn ensure_group(&self, group: GroupId) -> Option<Replica> {
        let _one = self.0.starting.lock().await;
        if let Some(r) = self.group(group) {
            return Some(r);
        }
        let config = self.0.template.lock().clone()?.for_split_group(group);
        match self.start_locked(group, &config).await {
            Ok(r) => {
                tracing::info!("started group {group}");
                Some(r)
            }
            Err(e) => {
                tracing::warn!(
                    "group {group} did not start: {e}; it is tried again when its peers \
                     next send to it"
                );
                None
            }
        }
    }

    /// [`Host::ensure_group`] for a peer's message, unless a split's
    /// apply is seeding the group now (the message is answered as for a
    /// group not hosted, and sent again).
    async fn start_on_message(&self, group: GroupId) -> Option<Replica> {
        if !self.0.claimed.lock().insert(group) {
            return None;
        }
        let started = self.ensure_group(group).await;
        self.0.claimed.lock().remove(&group);
        started
    }

    /// Whether the range map this node has applied (group 0's) names
    /// `group` as a range with a replica here: only such a group is started
    /// on a peer's message, never one the map does not know (a message
    /// from some other cluster, or for a group the node was never given).
    fn expects(&self, group: GroupId) -> bool {
        group != 0
            && !self.0.left_cluster.load(Ordering::Relaxed)
            && self
                .group(0)
                .and_then(|g| g.shared_range_map())
                .is_some_and(|map| {
                    map.get(group).is_some_and(|r| {
                        r.voters.contains(&self.0.id) || r.learners.contains(&self.0.id)
                    })
                })
    }

    /// Starts every group made by splits whose directory this node holds
    /// (after a restart): each goes on from its own log and snapshots.
    pub async fn start_split_groups(&self) -> Result<Vec<GroupId>, StartError> {
        let Some(template) = self.0.template.lock().clone() else {
            return Ok(Vec::new());
        };
        let mut found: Vec<GroupId> = match std::fs::read_dir(template.groups_dir()) {
            Ok(entries) => entries
                .filter_map(|e| {
                    let e = e.ok()?;
                    let name = e.file_name().into_string().ok()?;
                    // A deletion a crash cut short: finished now.
                    if name.ends_with(REMOVING) {
                        if let Err(err) = std::fs::remove_dir_all(e.path()) {
                            tracing::warn!("removing {}: {err}", e.path().display());
                        }
                        return None;
                    }
                    name.parse().ok()
                })
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        found.sort_unstable();
        for &g in &found {
            // Under the lock, as a split applied while group 0 replays its
            // log may start the same group meanwhile.
            let _one = self.0.starting.lock().await;
            if self.group(g).is_none() {
                self.start_locked(g, &template.for_split_group(g)).await?;
            }
        }
        Ok(found)
    }

    /// What every replica of a group does with its splits' new ranges:
    /// seeds the new group's directory, then starts it; one of its voters
    /// stands for election at once (`stand_first`).
    fn split_hook(&self, config: &ReplicaConfig) -> SplitHook {
        // Weak: the host owns the groups whose state machines call this.
        let host: Weak<Inner> = Arc::downgrade(&self.0);
        let mut config = config.clone();
        config.on_split = None;
        SplitHook(Arc::new(move |child: SplitChild| {
            let group = child.bounds.id;
            let inner = host.upgrade();
            if let Some(inner) = &inner {
                inner.counts.splits.fetch_add(1, Ordering::Relaxed);
            }
            let dir = config.for_split_group(group).dir;
            if dir.with_extension(&GONE[1..]).exists() {
                tracing::debug!("range {group} moved away from this node before: not seeded again");
                return;
            }
            if !inner
                .as_ref()
                .is_none_or(|inner| inner.claimed.lock().insert(group))
            {
                // A peer's message is starting it (empty): its leader
                // sends it a snapshot.
                tracing::debug!("range {group} is being started on a message: not seeded");
                return;
            }
            let seeded = seed_split_group(&dir, &child);
            if let Some(inner) = &inner {
                // Noted before the claim is let go: a start on a peer's
                // message from then on finds it.
                if matches!(seeded, Ok(true)) {
                    let seed = crate::node::SplitSeed {
                        since: child.since,
                        clock: child.store.read_version(),
                        pins: child.pins.clone(),
                    };
                    inner.split_seeds.lock().insert(group, seed);
                }
                inner.claimed.lock().remove(&group);
            }
            let seeded = match seeded {
                Ok(seeded) => seeded,
                Err(e) => {
                    tracing::error!(
                        "seeding group {group} at {}: {e}; its leader sends it a snapshot instead",
                        dir.display()
                    );
                    return;
                }
            };
            // Only a split applied as it is made stands the new group's
            // first election: not one replayed after a restart (seeded
            // before, its group may have had a leader long since) nor one
            // this replica applied long after the others, where standing
            // would unseat the leader they elected.
            let age = crate::ranges::clock::wall_ms().saturating_sub(child.now_ms);
            let fresh = seeded && age < FRESH_SPLIT_MS;
            if let Some(inner) = inner {
                tokio::spawn(async move {
                    if let Some(child) = Host(inner).ensure_group(group).await
                        && fresh
                    {
                        stand_first(&child).await;
                    }
                });
            }
        }))
    }

    /// Splits range `range` at `at` (strictly inside it), making a new
    /// range of the keys from `at` on, and returns its id. The range map
    /// (group 0's) records the split first: it is the record every node
    /// routes by, and the range's own group follows it (the split driver,
    /// below). Range 0 is split by group 0 itself, map and range in one
    /// entry. Decided by the map as committed (a read index on group 0
    /// first, so a split just made elsewhere is seen); refused, changing
    /// nothing, if the map moved meanwhile, or while a snapshot pins the
    /// range (the new range would keep the pinned store's memory held
    /// until the snapshot ends: release the snapshot first;
    /// [`Pinned::Force`] splits all the same). The pins are asked of the
    /// range's voters before the map changes, not in the same step: a
    /// snapshot whose pins land between the two is handed over to the new
    /// range with them, as after a forced split (`Past::inherit`).
    pub async fn split(&self, range: RangeId, at: &[u8]) -> Result<RangeId, ClusterError> {
        self.split_when(range, at, Pinned::Refuse).await
    }

    /// [`Host::split`], carried out even while a snapshot pins the range
    /// with [`Pinned::Force`].
    pub async fn split_when(
        &self,
        range: RangeId,
        at: &[u8],
        pinned: Pinned,
    ) -> Result<RangeId, ClusterError> {
        let (meta, map) = self.committed_map().await?;
        self.split_in(&meta, &map, range, at, pinned).await
    }

    /// [`Host::split_when`] of the range holding `key`, at `key`; refused
    /// if `key` starts a range already.
    pub async fn split_at(&self, key: &[u8], pinned: Pinned) -> Result<RangeId, ClusterError> {
        let (meta, map) = self.committed_map().await?;
        let r = map.route(key);
        if r.start == key {
            return Err(ClusterError::Refused(format!(
                "range {} starts at this key already",
                r.id
            )));
        }
        self.split_in(&meta, &map, r.id, key, pinned).await
    }

    /// Group 0 and its range map, once it has applied what was committed
    /// when asked.
    async fn committed_map(&self) -> Result<(Replica, Arc<RangeMap>), ClusterError> {
        let meta = self
            .group(0)
            .ok_or_else(|| ClusterError::Refused("this node hosts no group 0".into()))?;
        meta.read_barrier().await?;
        let map = meta
            .shared_range_map()
            .ok_or_else(|| ClusterError::Refused("the cluster is not formed yet".into()))?;
        Ok((meta, map))
    }

    async fn split_in(
        &self,
        meta: &Replica,
        map: &RangeMap,
        range: RangeId,
        at: &[u8],
        pinned: Pinned,
    ) -> Result<RangeId, ClusterError> {
        let desc = map
            .get(range)
            .ok_or_else(|| ClusterError::Refused(format!("no range {range}")))?;
        let why = "a range split off would keep the store it was split from held until they end";
        self.refuse_if_pinned(desc, pinned, why, "split").await?;
        let new_id = map.next_id();
        if range == 0 {
            meta.split_range(at, new_id).await?;
            return Ok(new_id);
        }
        meta.change_ranges(&MapChange::Split {
            range,
            epoch: desc.epoch,
            at: at.to_vec(),
            new_id,
        })
        .await?;
        // The split driver of the range's leader applies it to the range;
        // if this node leads it, at once.
        self.drive_splits().await;
        Ok(new_id)
    }

    /// Sets the replicas the map wants range `range` on (not range 0,
    /// whose replicas are the cluster's membership: `add_node` and
    /// `remove_node` of group 0). The range's leader then moves the group
    /// there (`drive_replicas`). Refused if the map moved meanwhile.
    pub async fn set_replicas(
        &self,
        range: RangeId,
        voters: Vec<NodeId>,
        learners: Vec<NodeId>,
    ) -> Result<(), ClusterError> {
        if range == 0 {
            return Err(ClusterError::Refused(
                "range 0's replicas are the cluster's members: add or remove nodes".into(),
            ));
        }
        let meta = self
            .group(0)
            .ok_or_else(|| ClusterError::Refused("this node hosts no group 0".into()))?;
        let desc = meta
            .range_map()
            .and_then(|m| m.get(range).cloned())
            .ok_or_else(|| ClusterError::Refused(format!("no range {range}")))?;
        meta.change_ranges(&MapChange::Replicas {
            range,
            epoch: desc.epoch,
            voters,
            learners,
        })
        .await
    }

    /// Deletes the files of this node's replica of `group` (stopped): its
    /// directory is renamed aside first, so that a crash part-way leaves
    /// nothing a restart would start (`start_split_groups` removes what is
    /// left), then its log (through the log's storage, where it lives) and
    /// the rest are removed.
    fn delete_group_files(&self, group: GroupId) -> std::io::Result<()> {
        let Some(template) = self.0.template.lock().clone() else {
            return Ok(());
        };
        let config = template.for_split_group(group);
        let aside = template.groups_dir().join(format!("{group}{REMOVING}"));
        // The mark first: whatever a crash leaves of the rest, the parent's
        // split never seeds the group again.
        std::fs::write(template.groups_dir().join(format!("{group}{GONE}")), b"")?;
        match std::fs::rename(&config.dir, &aside) {
            // Durable before the files go: the node's journal skips a
            // segment it no longer finds when it retires a file, so a
            // rename a power cut undid would bring the replica back
            // without appends only the journal held.
            Ok(()) => std::fs::File::open(template.groups_dir())?.sync_all()?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        if let Some(storage) = &config.log_storage {
            // A log kept elsewhere (a simulated file system) by its path.
            let log = config.dir.join("log");
            for name in storage.list(&log).unwrap_or_default() {
                storage.remove(&log.join(name))?;
            }
        }
        match std::fs::remove_dir_all(&aside) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Stops serving `group`'s peers and hands its replica back (for the
    /// caller to shut down); requests for it are answered as for a group
    /// the node never had.
    pub fn remove_group(&self, group: GroupId) -> Option<Replica> {
        self.0.groups.write().remove(&group)
    }

    /// The replica of `group`, if this node hosts one.
    pub fn group(&self, group: GroupId) -> Option<Replica> {
        self.0.groups.read().get(&group).cloned()
    }

    /// What this node holds of the ranges and did to them (INFO's
    /// `ranges` section). Counts keys and bytes with each store's own
    /// figures: nothing is scanned.
    pub fn range_stats(&self) -> RangeStats {
        let map = self.range_map();
        let c = &self.0.counts;
        let mut st = RangeStats {
            ranges: map.len() as u64,
            splits: c.splits.load(Ordering::Relaxed),
            merges: c.merges.load(Ordering::Relaxed),
            replicas_added: c.added.load(Ordering::Relaxed),
            replicas_removed: c.removed.load(Ordering::Relaxed),
            replicas_deleted: c.deleted.load(Ordering::Relaxed),
            leaders_moved: c.leaders_moved.load(Ordering::Relaxed),
            ..RangeStats::default()
        };
        for g in self.groups() {
            let Some(r) = self.group(g) else { continue };
            let named = map
                .get(g)
                .is_some_and(|d| d.voters.contains(&self.0.id) || d.learners.contains(&self.0.id));
            if !named {
                st.stale += 1;
                continue;
            }
            st.hosted += 1;
            st.leading += u64::from(r.is_leader());
            st.snapshot_pins += r.snapshot_pins() as u64;
            let t = r.snapshot_transfers();
            st.snapshots.sending += t.sending;
            st.snapshots.receiving += t.receiving;
            st.snapshots.sent += t.sent;
            st.snapshots.received += t.received;
            let store = r.current_store();
            let m = store.memory();
            st.keys += store.len();
            st.bytes += m.node_bytes + m.value_bytes;
        }
        st
    }

    /// The replica here whose group's own bounds (as it has applied them)
    /// hold `key`, among those the map names here: the one that has the
    /// key's value while a split the map records is not yet carried out
    /// (its new group not started here yet).
    pub fn holding(&self, key: &[u8]) -> Option<Replica> {
        let map = self.range_map();
        map.ranges()
            .filter_map(|r| self.serving(r.id))
            .find(|r| r.bounds().contains(key))
    }

    /// This node's replicas of the ranges the map names one of here, in
    /// the map's key order: what a read index must cover.
    pub fn serving_all(&self) -> Vec<Replica> {
        let map = self.range_map();
        map.ranges().filter_map(|r| self.serving(r.id)).collect()
    }

    /// The groups this node hosts.
    pub fn groups(&self) -> Vec<GroupId> {
        let mut ids: Vec<GroupId> = self.0.groups.read().keys().copied().collect();
        ids.sort_unstable();
        ids
    }
}

impl Host {
    /// Starts a node that talks TCP: binds `config.raft_addr`, serves peers
    /// there, and starts group 0 and every group its splits made that the
    /// node holds. Runs inside the current tokio runtime.
    pub async fn start(config: &ReplicaConfig) -> Result<Host, StartError> {
        let config = &with_journal(config)?;
        let host = Host::bind(config.id, config.raft_addr, config.peer_tls.clone()).await?;
        host.start_group(0, config).await?;
        host.start_split_groups().await?;
        Ok(host)
    }

    /// The range map this node routes by (group 0's, as applied here; a
    /// map of one range before the cluster is formed).
    pub fn range_map(&self) -> Arc<RangeMap> {
        self.group(0)
            .and_then(|g| g.shared_range_map())
            .unwrap_or_else(|| Arc::new(RangeMap::new(Vec::new())))
    }

    /// This node's replica of range `range`, if the map names one here (a
    /// replica a move left behind is out of its group, and serves
    /// nothing).
    pub fn serving(&self, range: RangeId) -> Option<Replica> {
        self.group(range)
            .filter(|_| range == 0 || self.expects(range))
    }
}

impl Replica {
    /// Starts a node that talks TCP (see [`Host::start`]) and returns its
    /// group 0.
    pub async fn start(config: &ReplicaConfig) -> Result<Replica, StartError> {
        let host = Host::start(config).await?;
        Ok(host.group(0).expect("group 0 started"))
    }

    /// Starts a node of one group (group 0) on a simulated network (tests):
    /// inside the current runtime, usually a single-threaded one with its
    /// clock paused.
    pub async fn start_simulated(
        config: &ReplicaConfig,
        net: &crate::network::sim::SimNet,
    ) -> Result<Replica, StartError> {
        Host::simulated(config.id, net).start_group(0, config).await
    }
}

/// `config` with the node's journal (`log_store::Journal`), opened (which
/// replays it into the logs) before any log is. Every log that does its
/// file work on a thread has it done by the journal's log writer, one
/// thread for the node; those that sync every append sync them in the
/// journal, one fsync per turn for every group this node hosts, not one
/// per group. A journal left by an earlier start is replayed whatever the
/// policy now. A node whose logs do their file work inline
/// (a simulation) neither has nor reads one.
fn with_journal(config: &ReplicaConfig) -> Result<ReplicaConfig, StartError> {
    let mut config = config.clone();
    if config.log.inline || config.log_journal.is_some() {
        return Ok(config);
    }
    let (journal, replayed) = crate::log_store::Journal::open(config.log_storage(), &config.dir)
        .map_err(StartError::Log)?;
    if replayed > 0 {
        tracing::info!("raft log journal: {replayed} entries written again into their logs");
    }
    // Each log takes it only where it syncs every append
    // (`LogStore::open_journaled`).
    config.log_journal = Some(journal);
    Ok(config)
}

/// How soon after it applies the split the new group's first election is
/// stood by the voter its id picks, how long an election is given to make
/// a leader (a vote's round trip and fsyncs) before it is stood again, and
/// how many times (then the election timer takes over).
const FIRST_STAND: std::time::Duration = std::time::Duration::from_millis(50);
const FIRST_STAND_AGAIN: std::time::Duration = std::time::Duration::from_millis(150);
const FIRST_STAND_TRIES: usize = 6;
/// A split older than this (its entry's clock) when this replica applies
/// it is not stood for: the other voters have had time to elect.
const FRESH_SPLIT_MS: u64 = 500;

/// The first election of a group a split made, stood by the voter its id
/// picks (`Replica::stands_first`). Left to the election timer, it waited
/// a lease and a draw (1.3 to 1.6 s by default) with no leader, and every
/// write to the new range waited with it. The splitting group's leader
/// applied the split first (it committed it) and the other voters apply it
/// within a message of each other (openraft sends the new commit index at
/// once), so after a short pause they have started the group and can
/// vote. One that has not answers the vote as a node that missed the split
/// does: it starts an empty replica, which the leader then sends a
/// snapshot (slower, never wrong). An election that makes no leader is
/// stood again after the pause.
async fn stand_first(child: &Replica) {
    // After the pause: the group's membership is known once openraft has
    // loaded its seed.
    tokio::time::sleep(FIRST_STAND).await;
    if !child.stands_first() {
        return;
    }
    for _ in 0..FIRST_STAND_TRIES {
        if child.leader_addr().is_some() || !child.stand().await {
            return;
        }
        tokio::time::sleep(FIRST_STAND_AGAIN).await;
    }
}
