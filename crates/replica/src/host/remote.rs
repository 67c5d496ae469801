//! Reads of a range this node holds no replica of: sent to a node that
//! holds one (`Request::Read`), which answers after a read index of its
//! own, so a remote read is as linearizable as a local one.

use tokio::time::Instant;

use super::Host;
use crate::client::{NO_LEADER_RETRY, REQUEST_TIMEOUT};
use crate::error::ClusterError;
use crate::ranges::RangeId;
use crate::rpc::{At, RemoteItem, RemoteRead, Request, Response};

impl Host {
    /// Runs `reads` on range `range` at a node the map names a replica of
    /// it on, each node in turn until one answers (one that does not host
    /// the group yet, is down or has no leader to take a read index from
    /// is passed over), within `REQUEST_TIMEOUT`. Refused if the range is
    /// not in the map, or a node says its bounds no longer hold what was
    /// asked (the map here is out of date: the caller routes again).
    /// At a timestamp, read there (`Request::ReadAt`, after raising the
    /// floor; a node whose past no longer reaches back refuses, and the
    /// caller takes the read again), or, pinned by a snapshot, at the
    /// first node that holds the pin (`Request::ReadPinned`).
    pub async fn read_remote(
        &self,
        range: RangeId,
        reads: Vec<RemoteRead>,
        at: At,
    ) -> Result<Vec<Vec<RemoteItem>>, ClusterError> {
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        let meta = self
            .group(0)
            .ok_or_else(|| ClusterError::Refused("this node hosts no group 0".into()))?;
        let mut last = String::from("no node answered");
        // Voters in a row that hold no pin of a snapshot's timestamp.
        let mut unpinned = 0;
        for turn in 0usize.. {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ClusterError::Refused(format!(
                    "range {range} could not be read: {last}"
                )));
            }
            let map = self.range_map();
            let desc = map
                .get(range)
                .ok_or_else(|| ClusterError::Refused(format!("range {range} is not in the map")))?;
            let Some(&node) = desc.voters.get(turn % desc.voters.len().max(1)) else {
                return Err(ClusterError::Refused(format!(
                    "range {range} has no voters"
                )));
            };
            let addrs = super::member_addrs(&meta);
            let Some(addr) = addrs.get(&node) else {
                tokio::time::sleep(NO_LEADER_RETRY.min(left)).await;
                continue;
            };
            let read = match at {
                At::Now => Request::Read(reads.clone()),
                At::Settle(t) => Request::ReadAt(t, reads.clone()),
                At::Pinned(t) => Request::ReadPinned(t, reads.clone()),
            };
            let req = Request::for_group(range, read);
            match self.0.transport.call(node, addr, req, left).await {
                Ok(Response::Read(Ok(items))) if items.len() == reads.len() => return Ok(items),
                Ok(Response::Read(Ok(_))) => {
                    return Err(ClusterError::Unknown(format!(
                        "node {node} answered another number of reads"
                    )));
                }
                Ok(Response::Read(Err(why)))
                    if why.contains("range map has changed")
                        || (why.contains(crate::PAST_GONE) && matches!(at, At::Settle(_))) =>
                {
                    return Err(ClusterError::Refused(why));
                }
                Ok(Response::Read(Err(why))) if why.contains(crate::PAST_GONE) => {
                    // Pinned: another voter may hold the pin; once none
                    // does, the snapshot is gone for this range.
                    unpinned += 1;
                    if unpinned >= desc.voters.len() {
                        return Err(ClusterError::Refused(why));
                    }
                    last = format!("node {node}: {why}");
                    continue;
                }
                Ok(Response::Read(Err(why))) => last = format!("node {node}: {why}"),
                Ok(Response::NoSuchGroup(_)) => last = format!("node {node} does not host it yet"),
                Ok(_) => last = format!("node {node} answered something else"),
                Err(e) => last = format!("node {node}: {e}"),
            }
            // Once round the voters, a pause before the next round.
            if (turn + 1) % desc.voters.len().max(1) == 0 {
                tokio::time::sleep(NO_LEADER_RETRY.min(left)).await;
            }
        }
        unreachable!("the loop returns")
    }
}
