//! Why a node could not start, and why a cluster request failed: the
//! errors every layer of the node reports in.

use openraft::BasicNode;
use openraft::error::{ClientWriteError, RaftError};

use crate::types::NodeId;

/// Why a cluster request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClusterError {
    /// No leader could be reached in time: nothing was written.
    NoLeader,
    /// The write may or may not have been applied (its answer was lost).
    Unknown(String),
    /// This request must go to the leader (administration).
    NotLeader {
        /// The leader this node knows of.
        leader: Option<NodeId>,
        /// Its Raft address, when known.
        addr: Option<String>,
    },
    /// The cluster refused the request; the text says why.
    Refused(String),
    /// The node is shutting down.
    Stopped,
}

impl std::fmt::Display for ClusterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClusterError::NoLeader => write!(f, "no leader is reachable"),
            ClusterError::Unknown(why) => {
                write!(f, "the write may or may not have been applied: {why}")
            }
            ClusterError::NotLeader { leader, addr } => match (leader, addr) {
                (Some(id), Some(a)) => write!(f, "not the leader; node {id} at {a} is"),
                _ => write!(f, "not the leader, and no leader is known"),
            },
            ClusterError::Refused(why) => write!(f, "{why}"),
            ClusterError::Stopped => write!(f, "the node is shutting down"),
        }
    }
}

impl std::error::Error for ClusterError {}

impl From<ClusterError> for combkv::Error {
    /// As a store's error: a lost answer is uncertain, anything else a
    /// write that was not taken.
    fn from(e: ClusterError) -> combkv::Error {
        match e {
            ClusterError::Unknown(why) => combkv::Error::Uncertain(why),
            other => combkv::Error::Unavailable(other.to_string()),
        }
    }
}

/// Why a node could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum StartError {
    /// The configuration cannot work; the text says why.
    Config(String),
    /// The Raft log did not open (damage, another version's files).
    Log(crate::log_store::OpenError),
    /// A file or socket operation failed (the data directory, the Raft
    /// address).
    Io(std::io::Error),
    /// openraft refused to start the node; the text says why.
    Raft(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Config(why) => write!(f, "bad cluster configuration: {why}"),
            StartError::Log(e) => e.fmt(f),
            StartError::Io(e) => write!(f, "cluster node: {e}"),
            StartError::Raft(why) => write!(f, "starting Raft: {why}"),
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StartError::Log(e) => Some(e),
            StartError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for StartError {
    fn from(e: std::io::Error) -> Self {
        StartError::Io(e)
    }
}

pub(crate) fn write_error(
    e: RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>,
) -> ClusterError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => ClusterError::NotLeader {
            leader: f.leader_id,
            addr: f.leader_node.map(|n| n.addr),
        },
        other => ClusterError::Refused(other.to_string()),
    }
}
