//! combkv's replication: a Raft group on openraft whose log is the
//! write-ahead log (`log_store`) and whose state machine is a combkv store.
//!
//! Every openraft type stays inside this crate: the engine knows nothing of
//! Raft, and the server talks to a cluster through this crate's own types.

mod client;
pub mod codec;
mod election;
mod group_commit;
mod health;
pub mod log_store;
mod membership;
pub mod network;
mod node;
mod restored;
mod rpc;
mod snapshot;
mod state_machine;
mod tally;
pub mod types;

pub use client::{ClusterError, REQUEST_TIMEOUT, Results};
pub use log_store::{LogOptions, LogStore, OpenError, OpenReport, SyncPolicy};
pub use node::{ApplyHook, Replica, ReplicaConfig, Role, StartError, Status, cluster_dir};
pub use state_machine::{StateMachine, StoreCell};
pub use tally::{CodecTally, codec_tally};
pub use types::{Applied, Batch, NodeId, TypeConfig};
