//! What nodes say to each other: openraft's three RPCs, and the two of
//! combkv's own that let any node serve any client (a follower forwards its
//! clients' writes to the leader, and asks the leader for a read index).

use openraft::error::{CheckIsLeaderError, InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};

use crate::types::{Batch, LogId, NodeId, TypeConfig};

/// A request from one node to another.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Request {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    /// One chunk of a snapshot (openraft streams snapshots in chunks).
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    /// A follower's clients' writes, to be proposed by the leader.
    Forward(Batch),
    /// A follower asks the leader for the log id up to which it must have
    /// applied before it may answer a linearizable read.
    ReadIndex,
}

pub(crate) type RaftResult<T, E = openraft::error::Infallible> = Result<T, RaftError<NodeId, E>>;

/// The answer to a [`Request`], in kind.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Response {
    Append(RaftResult<AppendEntriesResponse<NodeId>>),
    Vote(RaftResult<VoteResponse<NodeId>>),
    Snapshot(RaftResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError>),
    Forward(crate::group_commit::Forwarded),
    ReadIndex(RaftResult<Option<LogId>, CheckIsLeaderError<NodeId, openraft::BasicNode>>),
}

/// The largest frame a node accepts: a snapshot chunk, or an append of
/// entries, each bounded well below it.
pub(crate) const MAX_FRAME_BYTES: usize = 256 << 20;

/// Encodes `msg` as a frame: `[length: u32 LE][postcard payload]`.
pub(crate) fn encode<T: Serialize>(msg: &T) -> std::io::Result<Vec<u8>> {
    let mut out = vec![0u8; 4];
    let payload = postcard::to_stdvec(msg).map_err(std::io::Error::other)?;
    if payload.len() > MAX_FRAME_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("a message of {} bytes is too large", payload.len()),
        ));
    }
    out[..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// Decodes a frame's payload.
pub(crate) fn decode<T: for<'de> Deserialize<'de>>(payload: &[u8]) -> std::io::Result<T> {
    postcard::from_bytes(payload)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}
