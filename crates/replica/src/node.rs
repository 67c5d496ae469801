//! One node of a cluster: its Raft instance, log and state machine, the
//! requests it serves for its peers, and its administration (initialize,
//! add and remove nodes, status).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::error::{InitializeError, RaftError};
use openraft::raft::AppendEntriesResponse;
use openraft::{BasicNode, Raft, ServerState, SnapshotPolicy};

use crate::error::{ClusterError, StartError};
use crate::group_commit::GroupCommit;
use crate::log_store::{LogOptions, LogStore};
use crate::network::tls::{PeerGuard, PeerTlsFiles};
use crate::network::{BoxFuture, Handler, Network, Transport};
use crate::replica::{
    Contact, Inner, MAX_IN_FLIGHT, ReadBatcher, Replica, RestoredLeadership, index_of,
};
use crate::rpc::{At, Request, Response};
use crate::state_machine::{ApplyHook, SplitHook, StateMachine};
use crate::types::{GroupId, NodeId};

/// How a node is set up.
#[derive(Debug, Clone)]
pub struct ReplicaConfig {
    /// This node's id in the cluster, never 0.
    pub id: NodeId,
    /// The address peers reach this node at (`--raft-addr`).
    pub raft_addr: SocketAddr,
    /// The Raft log, snapshots and vote live here.
    pub dir: PathBuf,
    /// A follower that hears no leader for a random time in this range,
    /// after the leader's lease (openraft makes it the range's top) ran
    /// out, starts an election: a dead leader is replaced after 1.3 to 1.6
    /// s. The time is drawn anew for every election (`election`), and a
    /// split vote is retried within 100 to 300 ms. The 150-300 ms of the Raft paper make a loaded two-core host elect
    /// spuriously.
    pub election_timeout_ms: (u64, u64),
    /// How often a leader sends heartbeats.
    pub heartbeat_ms: u64,
    /// A snapshot is taken once this many entries were applied since the
    /// last one; the log before it is then purged.
    pub snapshot_entries: u64,
    /// A snapshot is also taken once the entries applied since the last
    /// one take this many bytes in the log (0: never by bytes), so that
    /// large entries cannot grow the log far past the data.
    pub snapshot_log_bytes: u64,
    /// Entries kept in the log behind a snapshot when it is purged, so that
    /// a follower a little behind catches up from the log, not a snapshot.
    pub log_keep_entries: u64,
    /// How the log is kept (its sync policy is the server's durability).
    pub log: LogOptions,
    /// The file system the log is kept on: the real one unless a test
    /// gives one that loses what was not synced when it crashes.
    pub log_storage: Option<Arc<dyn combkv::durable::Storage>>,
    /// The node's journal, through which every log it hosts syncs its
    /// appends (`Host::start` opens it; none: each log syncs its own).
    pub log_journal: Option<Arc<crate::log_store::Journal>>,
    /// The store's configuration.
    pub engine: combkv::Config,
    /// Called after each batch is applied (change feeds, tests).
    pub on_apply: Option<ApplyHook>,
    /// Log entries the leader has in flight at once; proposals that come
    /// meanwhile wait and share the next entry (group commit). One is
    /// fastest on a small machine, where openraft's cost per entry is what
    /// limits writes (`docs/experiments.md`, "Cluster").
    pub entries_in_flight: usize,
    /// Mutual TLS with the other nodes (`network/tls.rs`); none: plain
    /// TCP, for loopback and networks nobody else reaches.
    pub peer_tls: Option<PeerTlsFiles>,
    /// Told of each split's new range (the host sets it: it starts the
    /// new group).
    pub on_split: Option<SplitHook>,
    /// Where the groups a split makes keep their directories, one per
    /// group id (none: `dir/groups`, of the node's first group).
    pub groups_dir: Option<PathBuf>,
    /// A range whose keys and values take more than this many bytes is
    /// split by its leader at the key that halves them (0: never; the
    /// server's `cluster-range-split-bytes`).
    pub split_bytes: u64,
    /// The voters each range but range 0 is placed on (the meta group's
    /// leader moves them so that no node holds two more replicas than
    /// another; 0: ranges keep the members they were split with; the
    /// server's `cluster-range-replicas`).
    pub range_replicas: usize,
    /// A cluster member that has not answered the meta group's leader for
    /// this long is placed as if it had left: the ranges it holds replicas
    /// of get replicas elsewhere (None: never; the server's
    /// `cluster-node-down-seconds`).
    pub node_down_after: Option<std::time::Duration>,
    /// A range that takes this many requests a second or more (write ops
    /// its group applies, reads served by the leader's replica), several
    /// seconds in a row, is split by its leader at the middle of its
    /// sampled keys (0: never by load; the server's
    /// `cluster-range-split-load`).
    pub split_load: u64,
    /// A range whose keys and values, with those of the range after it (on
    /// the same nodes), take fewer than this many bytes is merged with it
    /// by its leader (0: never by size; the server's
    /// `cluster-range-merge-bytes`).
    pub merge_bytes: u64,
    /// Set by the server while the node is above its memory limit: its
    /// leaders then refuse writes that can add data (`MemoryGate`).
    pub memory: crate::group_commit::MemoryGate,
    /// The bound on the nodes' clock offset that apply's commit wait
    /// covers, shared by the node's groups (the server's
    /// `cluster-max-clock-offset`; 0: one host's clock).
    pub clock_offset: crate::ranges::ClockOffset,
    /// Of a group a split seeded here just now: what its past starts
    /// from (`SplitSeed`).
    pub(crate) split_seed: Option<SplitSeed>,
}

/// What the past of a group a split seeded here just now starts from.
#[derive(Debug, Clone)]
pub(crate) struct SplitSeed {
    /// The version from which its seed reads the same
    /// (`SplitChild::since`): the store opened from the seed is held from
    /// it, if its clock is `clock`, the seed's (`Past::seed`).
    pub(crate) since: combkv::Version,
    pub(crate) clock: combkv::Version,
    /// The snapshot pins the splitting range's replica here held
    /// (`SplitChild::pins`, `Past::inherit`).
    pub(crate) pins: Vec<crate::past::Pin>,
}

impl ReplicaConfig {
    /// The defaults for node `id` at `raft_addr`, storing in `dir`.
    pub fn new(id: NodeId, raft_addr: SocketAddr, dir: impl Into<PathBuf>) -> ReplicaConfig {
        ReplicaConfig {
            id,
            raft_addr,
            dir: dir.into(),
            election_timeout_ms: (500, 800),
            heartbeat_ms: 100,
            snapshot_entries: 100_000,
            snapshot_log_bytes: 256 << 20,
            log_keep_entries: 1000,
            log: LogOptions::default(),
            log_storage: None,
            log_journal: None,
            engine: combkv::Config::default(),
            on_apply: None,
            entries_in_flight: 1,
            peer_tls: None,
            on_split: None,
            split_seed: None,
            groups_dir: None,
            split_bytes: 0,
            range_replicas: 0,
            node_down_after: Some(std::time::Duration::from_secs(30 * 60)),
            split_load: 0,
            merge_bytes: 0,
            memory: Default::default(),
            clock_offset: Default::default(),
        }
    }

    /// The directory groups made by splits keep theirs under.
    pub fn groups_dir(&self) -> PathBuf {
        self.groups_dir
            .clone()
            .unwrap_or_else(|| self.dir.join("groups"))
    }

    /// The file system the log is kept on (see `log_storage`).
    pub(crate) fn log_storage(&self) -> Arc<dyn combkv::durable::Storage> {
        match &self.log_storage {
            Some(s) => Arc::clone(s),
            None => Arc::new(combkv::durable::FsStorage),
        }
    }

    /// The configuration of group `group` made by a split, on this node:
    /// this one's, in the group's own directory.
    pub fn for_split_group(&self, group: GroupId) -> ReplicaConfig {
        let groups = self.groups_dir();
        let mut c = self.clone();
        c.dir = groups.join(group.to_string());
        c.groups_dir = Some(groups);
        c
    }

    fn raft_config(&self) -> Result<openraft::Config, StartError> {
        let c = openraft::Config {
            cluster_name: "combkv".into(),
            election_timeout_min: self.election_timeout_ms.0,
            election_timeout_max: self.election_timeout_ms.1,
            heartbeat_interval: self.heartbeat_ms,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_entries),
            max_in_snapshot_log_to_keep: self.log_keep_entries,
            install_snapshot_timeout: 10_000,
            ..Default::default()
        };
        c.validate().map_err(|e| StartError::Config(e.to_string()))
    }
}

impl Replica {
    /// Starts node `config.id` inside the current tokio runtime, sending
    /// to its peers through `transport`. The caller serves the node's
    /// requests (`handler`) at its address.
    pub(crate) async fn start_with(
        config: &ReplicaConfig,
        group: GroupId,
        transport: Arc<dyn Transport>,
        guard: Arc<PeerGuard>,
    ) -> Result<Replica, StartError> {
        let raft_config = Arc::new(config.raft_config()?);
        let storage = config.log_storage();
        let log_options = LogOptions {
            own_id: config.log.own_id.or(Some(config.id)),
            // Purging frees whole segments: a few per snapshot interval.
            segment_bytes: config
                .log
                .segment_bytes
                .min(match config.snapshot_log_bytes {
                    0 => u64::MAX,
                    n => (n / 4).max(1 << 20),
                }),
            ..config.log
        };
        let (log, report) = LogStore::open_journaled(
            storage,
            &config.dir.join("log"),
            log_options,
            config.log_journal.as_ref(),
        )
        .map_err(StartError::Log)?;
        if let Some((file, offset, bytes)) = &report.torn_tail {
            tracing::warn!(
                "raft log: cut a torn tail of {bytes} bytes at {file}:{offset} (a write cut short \
                 by a crash; nothing acknowledged was in it, the leader sends what is missing)"
            );
        }
        let restored = RestoredLeadership::find(config.id, &log).await?;
        let sm = StateMachine::open(
            config.engine.clone(),
            &config.dir.join("snapshots"),
            config.on_apply.clone(),
        )?;
        if let Some(seed) = &config.split_seed {
            let store = sm.store().get();
            if store.read_version() == seed.clock {
                sm.past().seed(&store, seed.since);
            }
            sm.past().inherit(seed.pins.clone());
        }
        let sm = sm
            .serving(group, config.on_split.clone())
            .with_clock_offset(config.clock_offset.clone());
        let sm = if config.split_load == 0 {
            sm.without_load()
        } else {
            sm
        };
        // Group 0 is the meta group: it keeps the range map.
        let sm = if group == 0 {
            sm.keeping_range_map()
        } else {
            sm
        };
        let health = Arc::new(crate::health::Health::default());
        let hold = Arc::new(crate::hold::Hold::default());
        let lease = Arc::new(crate::lease::Lease::default());
        let transfers = Arc::new(crate::transfers::Transfers::default());
        let raft = Raft::new(
            config.id,
            raft_config,
            Network::new(
                Arc::clone(&transport),
                Arc::clone(&health),
                Arc::clone(&hold),
                Arc::clone(&lease),
                Arc::clone(&transfers),
            ),
            log.clone(),
            sm.clone(),
        )
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?;
        // More entries in flight with a clock offset bound: the group
        // commit follows the bound (`GroupCommit::follow_bound`).
        let group = Arc::new(GroupCommit::new(
            raft.clone(),
            config.entries_in_flight,
            Arc::clone(&hold),
            config.memory.clone(),
            config.clock_offset.clone(),
        ));
        let inner = Arc::new(Inner {
            id: config.id,
            raft,
            log,
            reads: ReadBatcher::default(),
            floors: Default::default(),
            group,
            sm,
            transport,
            in_flight: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
            last_proposed_ms: std::sync::atomic::AtomicU64::new(0),
            proposals: combkv::DurationHistogram::new(),
            restored,
            contact: Contact::new(),
            health,
            guard,
            hold,
            lease,
            transfers,
        });
        let replica = Replica { inner };
        replica.spawn_read_loop();
        replica.spawn_floor_loop();
        replica.inner.group.spawn();
        replica.spawn_election_timer(config.election_timeout_ms);
        replica.spawn_snapshot_trigger(config.snapshot_log_bytes);
        if let Some(r) = restored {
            tracing::info!(
                "restarted as the leader of term {}: reads wait for entry {} to commit",
                r.vote.leader_id.term,
                r.last.index
            );
            replica.spawn_restored_blank();
        }
        Ok(replica)
    }

    /// Reads the peer certificate files again (`peer-cert-file` ...):
    /// connections made from now on use the new ones. Ok(false): the node
    /// has no peer TLS. A file that does not load changes nothing.
    pub fn reload_peer_tls(&self) -> Result<bool, String> {
        self.inner.guard.reload()
    }

    /// Makes this node the first member of a new cluster whose voters are
    /// `members` (id and Raft address each; this node among them). Fails if
    /// the node is already part of a cluster.
    pub async fn initialize(&self, members: &[(NodeId, String)]) -> Result<(), ClusterError> {
        let nodes: BTreeMap<NodeId, BasicNode> = members
            .iter()
            .map(|(id, addr)| (*id, BasicNode::new(addr)))
            .collect();
        match self.inner.raft.initialize(nodes).await {
            Ok(()) => Ok(()),
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Err(ClusterError::Refused(
                "this node is already part of a cluster".into(),
            )),
            Err(e) => Err(ClusterError::Refused(e.to_string())),
        }
    }

    /// What this node knows of the cluster now.
    pub fn status(&self) -> Status {
        let m = self.inner.raft.metrics().borrow().clone();
        let role = match m.state {
            ServerState::Leader => Role::Leader,
            ServerState::Follower => Role::Follower,
            ServerState::Candidate => Role::Candidate,
            ServerState::Learner => Role::Learner,
            ServerState::Shutdown => Role::Shutdown,
        };
        let membership = m.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let nodes: Vec<(NodeId, String, bool)> = membership
            .nodes()
            .map(|(id, n)| (*id, n.addr.clone(), voters.contains(id)))
            .collect();
        let last = m.last_log_index.unwrap_or(0);
        let followers = m
            .replication
            .as_ref()
            .map(|r| {
                r.iter()
                    .filter(|(id, _)| **id != self.inner.id)
                    .map(|(id, matched)| {
                        let at = matched.map_or(0, |l| l.index);
                        (*id, at, last.saturating_sub(at))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Status {
            id: self.inner.id,
            role,
            leader: m.current_leader,
            term: m.current_term,
            last_log_index: last,
            commit_index: index_of(self.inner.log.committed()),
            applied_index: m.last_applied.map_or(0, |l| l.index),
            snapshot_index: m.snapshot.map_or(0, |l| l.index),
            retired: self
                .inner
                .sm
                .ever_voters()
                .into_iter()
                .filter(|id| membership.get_node(id).is_none())
                .collect(),
            nodes,
            followers,
            problem: self.problem(),
            peer_tls: self.inner.guard.tls().is_some(),
            peers_refused: self.inner.guard.refused(),
            read_indexes_leased: self
                .inner
                .lease
                .leased
                .load(std::sync::atomic::Ordering::Relaxed),
            read_indexes_confirmed: self
                .inner
                .lease
                .rounds
                .load(std::sync::atomic::Ordering::Relaxed),
            fatal: m.running_state.as_ref().err().map(|e| e.to_string()),
        }
    }

    /// Stops the node's Raft instance.
    pub async fn shutdown(&self) {
        let _ = self.inner.raft.shutdown().await;
    }
}

/// A node's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Proposes writes and answers read indexes.
    Leader,
    /// A voter that follows a leader (or waits for one).
    Follower,
    /// A voter asking for votes.
    Candidate,
    /// A member that receives the log but does not vote (a node being
    /// added).
    Learner,
    /// The node is stopping or stopped.
    Shutdown,
}

impl Role {
    /// Its name in INFO and `CLUSTER STATUS`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Candidate => "candidate",
            Role::Learner => "learner",
            Role::Shutdown => "shutdown",
        }
    }
}

/// What [`Replica::status`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// This node's id.
    pub id: NodeId,
    /// What this node does now.
    pub role: Role,
    /// The leader this node knows of, if any.
    pub leader: Option<NodeId>,
    /// The current term.
    pub term: u64,
    /// The index of the last entry in this node's log.
    pub last_log_index: u64,
    /// The last index this node knows committed.
    pub commit_index: u64,
    /// The last index this node's store has applied.
    pub applied_index: u64,
    /// The last index the node's latest snapshot covers.
    pub snapshot_index: u64,
    /// (id, Raft address, voter) of every member.
    pub nodes: Vec<(NodeId, String, bool)>,
    /// On a leader: (follower id, matched index, lag in entries).
    pub followers: Vec<(NodeId, u64, u64)>,
    /// Ids of voters removed from the cluster: never given to a new node.
    pub retired: Vec<NodeId>,
    /// Why the node cannot join or elect, when it has been without a
    /// leader for a while or its `--peers` contradicts its cluster (see
    /// [`Replica::watch`]).
    pub problem: Option<String>,
    /// Whether connections with the other nodes are mutual TLS.
    pub peer_tls: bool,
    /// Connections to the Raft port refused since the node started (a
    /// failed TLS handshake, a certificate that does not name its
    /// address, a frame too large or that does not decode).
    pub peers_refused: u64,
    /// Read indexes this node gave as the leader under its lease, with no
    /// round (`lease`).
    pub read_indexes_leased: u64,
    /// Read indexes this node gave as the leader after a round of
    /// heartbeats to a quorum (its lease had lapsed).
    pub read_indexes_confirmed: u64,
    /// Why Raft stopped on its own (a log write that failed: a full
    /// disk), if it did; only a restart brings the node back.
    pub fatal: Option<String>,
}

impl Handler for Replica {
    fn handle(&self, req: Request) -> BoxFuture<'_, Response> {
        Box::pin(async move {
            let raft = &self.inner.raft;
            match req {
                Request::Append(r) => {
                    // Before openraft takes it: once it has, the leader
                    // may count it toward its lease (`lease`).
                    self.inner.contact.appended();
                    let resp = raft.append_entries(r).await;
                    if resp
                        .as_ref()
                        .is_ok_and(|a| !matches!(a, AppendEntriesResponse::HigherVote(_)))
                    {
                        self.inner.contact.heard();
                    }
                    Response::Append(resp)
                }
                Request::Vote(r) => {
                    let resp = raft.vote(r).await;
                    if let Ok(v) = &resp {
                        // Before the answer leaves: a vote this node took
                        // ends any lease it held as leader (`lease`).
                        self.inner.lease.voted(&v.vote);
                        if v.vote_granted {
                            self.inner.contact.heard();
                        }
                    }
                    Response::Vote(resp)
                }
                Request::Snapshot(r) => {
                    self.inner.contact.appended();
                    let (from, last) = (r.vote, r.done);
                    self.inner.transfers.receiving();
                    let resp = raft.install_snapshot(r).await;
                    self.inner.transfers.received(last, resp.is_ok());
                    if resp.as_ref().is_ok_and(|s| s.vote == from) {
                        self.inner.contact.heard();
                    }
                    Response::Snapshot(resp)
                }
                Request::Forward(batch) => Response::Forward(
                    self.inner
                        .group
                        .propose(batch)
                        .await
                        .map(|(log_id, results)| (log_id, crate::group_commit::encode(&results))),
                ),
                Request::ReadIndex => Response::ReadIndex(self.read_index_here().await),
                Request::Members => Response::Members(self.committed_members()),
                Request::MembersAt => Response::MembersAt(self.committed_membership()),
                Request::Read(reads) => {
                    Response::Read(self.serve_remote_reads(&reads, At::Now).await)
                }
                Request::ReadAt(t, reads) => {
                    Response::Read(self.serve_remote_reads(&reads, At::Settle(t)).await)
                }
                Request::ReadPinned(t, reads) => {
                    Response::Read(self.serve_remote_reads(&reads, At::Pinned(t)).await)
                }
                Request::HandOver(to) => {
                    // Answered at once; the hand-over takes about a lease.
                    let me = self.clone();
                    tokio::spawn(async move {
                        if let Err(e) = me.hand_over(to).await {
                            tracing::debug!("group {}: no hand-over to {to}: {e}", me.group());
                        }
                    });
                    Response::HandingOver
                }
                Request::Stand => Response::Stood(self.stand().await),
                Request::Bytes(limit) => Response::Bytes(self.bytes_below(limit)),
                Request::Pins => Response::Pins(self.snapshot_pins()),
                // Asked of a node (`host` answers for all its groups).
                Request::Leading => {
                    Response::Leading(self.is_leader().then(|| self.group()).into_iter().collect())
                }
                Request::Held => Response::Held(self.held_range().into_iter().collect()),
                Request::Loads => Response::Loads(
                    self.is_leader()
                        .then(|| (self.group(), self.load().rate()))
                        .into_iter()
                        .collect(),
                ),
                // A group's requests reach it unwrapped (`host`): one
                // wrapped twice names no group.
                Request::ToGroup(g, _) => Response::NoSuchGroup(g),
            }
        })
    }
}

/// Where a node keeps its files, under the server's data directory.
pub fn cluster_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("cluster")
}
