//! combkv's replication: a Raft group on openraft whose log is the
//! write-ahead log (`log_store`) and whose state machine is a combkv store.
//!
//! Every openraft type stays inside this crate: the engine knows nothing of
//! Raft, and the server talks to a cluster through this crate's own types.

pub mod log_store;
pub mod types;

pub use log_store::{LogStore, OpenError, OpenReport};
pub use types::{Applied, Batch, NodeId, TypeConfig};
