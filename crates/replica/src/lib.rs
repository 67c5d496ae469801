//! combkv's replication: a Raft group on openraft whose log is the
//! write-ahead log (`log_store`) and whose state machine is a combkv store.
//!
//! Every openraft type stays inside this crate: the engine knows nothing of
//! Raft, and the server talks to a cluster through this crate's own types.
//!
//! Its modules point down only (`scripts/layers` checks it), top first:
//!
//! - `host`: a node's Raft groups behind its one address (each group's
//!   requests name it), and starting a node of one group.
//! - `node`: starting a group's replica, serving its peers' requests, its
//!   status.
//! - The node's behaviours, each an `impl Replica` of its own: serving
//!   clients (`client`: writes through the leader, read indexes),
//!   administration (`membership`), elections (`election`), the health
//!   watch (`watch`), a restored leadership's reads (`restored`), snapshots
//!   by log bytes (`snapshot_trigger`).
//! - `replica`: the running node as they all see it, and the state they
//!   keep in it.
//! - `network` (peers over TCP, or simulated), `rpc` (what peers say),
//!   `group_commit` (the leader's proposal queue), `health` (how requests
//!   to each peer fared), `error`.
//! - `state_machine`, `snapshot`, `log_store`: the store, its snapshots,
//!   the Raft log.
//! - `types`, `codec`, `tally`: what an entry holds, and its bytes;
//!   `ranges`: the keyspace cut into ranges (the range map) and the clock
//!   whose timestamps order writes across them.

#![warn(missing_docs)]

mod client;
pub mod codec;
mod election;
mod error;
mod group_commit;
mod handover;
mod health;
mod hold;
mod host;
mod lease;
mod load;
pub mod log_store;
mod membership;
mod merge_steps;
pub mod network;
mod node;
mod past;
pub mod probe;
pub mod ranges;
mod read_at;
mod replica;
mod restored;
mod rpc;
mod snapshot;
mod snapshot_trigger;
mod state_machine;
mod tally;
mod transfers;
pub mod types;
mod watch;

pub use client::{REQUEST_TIMEOUT, Results, count_within};
pub use error::{ClusterError, StartError};
pub use group_commit::MemoryGate;
pub use host::{Host, Pinned, RangeStats, Routed, route_op};
pub use log_store::{LogOptions, LogStore, OpenError, OpenReport, SyncPolicy};
pub use network::tls::PeerTlsFiles;
pub use node::{ReplicaConfig, Role, Status, cluster_dir};
pub use past::PAST_GONE;
pub use read_at::PastView;
pub use replica::Replica;
pub use rpc::{At, RemoteItem, RemoteRead};
pub use state_machine::{ApplyHook, StateMachine, StoreCell};
pub use tally::{CodecTally, codec_tally};
pub use transfers::TransferCounts;
pub use types::{Applied, Batch, GroupId, NodeId, TypeConfig};
