//! What nodes say to each other: openraft's three RPCs, and the two of
//! combkv's own that let any node serve any client (a follower forwards its
//! clients' writes to the leader, and asks the leader for a read index),
//! each for one of the Raft groups a node hosts.

use openraft::error::{CheckIsLeaderError, InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};

use crate::types::{Batch, GroupId, LogId, NodeId, TypeConfig};

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
    /// A request for group `.0` of the node's groups (group 0's go bare).
    /// Last, so that every other request keeps its encoding.
    ToGroup(GroupId, Box<Request>),
    /// A node asks a group's leader whether it is still a member (it
    /// holds a replica the range map no longer names). After `ToGroup`,
    /// for the same reason.
    Members,
    /// Reads of a range by a node that holds no replica of it: answered
    /// linearizably (after a read index) from the replica asked.
    Read(Vec<RemoteRead>),
    /// Which groups the node leads (to the node, not to a group).
    Leading,
    /// To a group's leader: hand the leadership to this voter.
    HandOver(NodeId),
    /// To a group's voter, from its leader handing over: stand now.
    Stand,
    /// Reads of a range, as [`Request::Read`], at a timestamp: answered
    /// once the range's read floor is raised to it (`read_at`).
    ReadAt(u64, Vec<RemoteRead>),
    /// Reads of a range at a timestamp a snapshot pinned (no floor raised).
    ReadPinned(u64, Vec<RemoteRead>),
    /// To a group's replica: the bytes of keys and values its store holds,
    /// if fewer than this (a merge's leader sizing a range it holds no
    /// replica of).
    Bytes(u64),
    /// To a group's replica: how many snapshot timestamps it holds pinned
    /// (a split of the range waits for none).
    Pins,
    /// Which groups the node leads, each with the bytes its store holds
    /// (to the node: the meta group's leader places replicas by them). A
    /// node of a build from before it hangs up on it, and is asked
    /// [`Request::Leading`] for a while instead.
    Held,
    /// As [`Request::Members`], with the log id of the membership the
    /// answer comes from, so that the asker can tell a stale leader's
    /// answer (a leader cut off from a majority that changed the
    /// membership since) from the cluster's. Last, for the same reason as
    /// `ToGroup`.
    MembersAt,
    /// Which groups the node leads, each with the requests a second its
    /// replica last counted (to the node: the meta group's leader spreads
    /// leaders by them where splits by load are on). A node of a build
    /// from before it hangs up on it, and is not asked again for a while.
    Loads,
}

impl Request {
    /// `req` for group `group` of the node it is sent to: group 0's go
    /// bare, with the bytes a one-group cluster always sent.
    pub(crate) fn for_group(group: GroupId, req: Request) -> Request {
        match group {
            0 => req,
            g => Request::ToGroup(g, Box::new(req)),
        }
    }
}

/// When a read of a range is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// Now, after a read index (a read inside one range).
    Now,
    /// At this timestamp, once the range's read floor is raised to it (a
    /// read across ranges).
    Settle(u64),
    /// At this timestamp, pinned by a snapshot: no floor raised (the
    /// snapshot's own did), served only where the replica holds it.
    Pinned(u64),
}

/// One read of a range, sent to a node that holds a replica of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemoteRead {
    /// A key's live item.
    Get(#[serde(with = "serde_bytes")] Vec<u8>),
    /// The live items between two bounds, in key order (descending with
    /// `reverse`), at most `limit`.
    Range {
        /// The low bound.
        start: std::ops::Bound<Vec<u8>>,
        /// The high bound.
        end: std::ops::Bound<Vec<u8>>,
        /// At most this many items.
        limit: Option<u64>,
        /// Descending key order.
        reverse: bool,
    },
    /// How many live keys the range holds from `start` up to `end` (none:
    /// to the end of the keyspace): the range's bounds as the asker's map
    /// gives them. A replica whose own bounds are wider (it has not applied
    /// a split the asker's map records) counts only those; one whose bounds
    /// do not hold them refuses.
    Count {
        /// The range's first key.
        #[serde(with = "serde_bytes")]
        start: Vec<u8>,
        /// Its end (exclusive).
        end: Option<Vec<u8>>,
    },
}

/// An item as a remote read answers it (the same record a merge carries
/// its keys in).
pub use crate::ranges::MergedItem as RemoteItem;

/// What a remote read answers: per read, its items (a count's is one item
/// whose version is the count), or why none was served.
pub type RemoteAnswer = Result<Vec<Vec<RemoteItem>>, String>;

pub(crate) type RaftResult<T, E = openraft::error::Infallible> = Result<T, RaftError<NodeId, E>>;

/// The answer to a [`Request`], in kind.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Response {
    Append(RaftResult<AppendEntriesResponse<NodeId>>),
    Vote(RaftResult<VoteResponse<NodeId>>),
    Snapshot(RaftResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError>),
    Forward(crate::group_commit::Forwarded),
    ReadIndex(RaftResult<Option<LogId>, CheckIsLeaderError<NodeId, openraft::BasicNode>>),
    /// The node hosts no such group (not yet, or no longer): the sender
    /// backs off and tries again, as from a node that is down.
    NoSuchGroup(GroupId),
    /// The group's members, voters and learners, from the leader, once the
    /// membership they are in is committed (None: not the leader, or its
    /// membership not committed yet).
    Members(Option<Vec<NodeId>>),
    /// The answer to [`Request::Read`].
    Read(RemoteAnswer),
    /// The groups the node leads.
    Leading(Vec<crate::types::GroupId>),
    /// The leader took the hand-over on (it runs on after the answer).
    HandingOver,
    /// Whether the voter stood.
    Stood(bool),
    /// The answer to [`Request::Bytes`] (None: as many or more).
    Bytes(Option<u64>),
    /// The answer to [`Request::Pins`].
    Pins(usize),
    /// The answer to [`Request::Held`]: each group the node leads.
    Held(Vec<HeldRange>),
    /// The answer to [`Request::MembersAt`]: as `Members`, with the log
    /// id of the membership.
    MembersAt(Option<(LogId, Vec<NodeId>)>),
    /// The answer to [`Request::Loads`]: each group the node leads, with
    /// its requests a second.
    Loads(Vec<(crate::types::GroupId, u64)>),
}

/// A group a node leads, as it answers [`Request::Held`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HeldRange {
    pub(crate) group: GroupId,
    /// The bytes its store holds (nodes and values: its memory figure).
    pub(crate) bytes: u64,
    /// Its members, voters and learners, in order, once the membership
    /// they are in is committed (none before): a move under way shows
    /// here before it is done, where the map shows only where it goes.
    pub(crate) members: Option<Vec<NodeId>>,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Group 0's requests keep the bytes they always had, so nodes of one
    /// group still understand each other across an upgrade; another
    /// group's carry its id around the same request.
    #[test]
    fn a_request_names_its_group_only_past_group_0() {
        let bare = encode(&Request::ReadIndex).unwrap();
        assert_eq!(bare, [1, 0, 0, 0, 4], "ReadIndex is variant 4, as before");
        let wrapped = encode(&Request::ToGroup(7, Box::new(Request::ReadIndex))).unwrap();
        assert_eq!(wrapped, [3, 0, 0, 0, 5, 7, 4]);
        match decode::<Request>(&wrapped[4..]).unwrap() {
            Request::ToGroup(7, inner) => assert!(matches!(*inner, Request::ReadIndex)),
            other => panic!("{other:?}"),
        }
        let answer = encode(&Response::NoSuchGroup(7)).unwrap();
        assert!(matches!(
            decode::<Response>(&answer[4..]).unwrap(),
            Response::NoSuchGroup(7)
        ));
    }

    /// Requests added after the first release keep their place at the
    /// end: an older node cannot decode them and hangs up, which the
    /// asker takes for an older build; any other order would make an
    /// older node read them as another request.
    #[test]
    fn late_requests_keep_their_variants() {
        for (req, index) in [
            (Request::Held, 15),
            (Request::MembersAt, 16),
            (Request::Loads, 17),
        ] {
            assert_eq!(encode(&req).unwrap(), [1, 0, 0, 0, index], "{req:?}");
        }
        let answer = encode(&Response::Loads(vec![(3, 1_500), (9, 0)])).unwrap();
        assert!(matches!(
            decode::<Response>(&answer[4..]).unwrap(),
            Response::Loads(l) if l == [(3, 1_500), (9, 0)]
        ));
    }
}
