//! Merging a range into its left neighbour: the two entries that carry it
//! out, each applied by every replica of its group at the same index.
//!
//! The map records a merge first (`MapChange::Merge`: the left range takes
//! both halves' bounds, the right one leaves the map), as it records a
//! split first, and marks the left range merging: no split, merge or move
//! of it is taken until its group has carried the merge out
//! (`MapChange::Merged`). The two groups catch up with it, in this order:
//!
//! 1. The right range's group applies a [`RetireRange`]: from that entry
//!    on it serves nothing (every write and read of it is refused, and
//!    routed again by a newer map), so its keys stand still.
//! 2. The left range's leader takes those keys from a replica that has
//!    applied the retirement and proposes them in its own group's log as
//!    an [`AbsorbRange`]: every replica of the left range makes its store
//!    from its own keys and those, versions, expiries and flags kept (CAS
//!    tokens survive the merge), and takes the merged bounds with the
//!    epoch the map gave them.
//!
//! Between the two, the right half of the merged range answers nobody:
//! requests for it wait and are routed again, as requests for a range
//! split off but not started yet do. A right range is retired only after
//! the map has given its keys away, so that retiring never strands them;
//! its replicas are deleted once the left range on their node has
//! absorbed them.
//!
//! Reads at a timestamp: a retired range refuses them, and the merged
//! range's new store holds no past older than the absorbing entry, so a
//! read at a timestamp before it (or a snapshot pinned before it) is
//! refused rather than misread, and taken again at a new timestamp.

use serde::{Deserialize, Serialize};

use super::map::{Bounds, RangeId};

/// Retires the range the group serves, if its bounds are `[start, end)`
/// (the map merged exactly those into the range on the left). Applied
/// again once retired, it changes nothing and answers as the first did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetireRange {
    /// The range's first key.
    #[serde(with = "serde_bytes")]
    pub start: Vec<u8>,
    /// Its end as the proposer saw it (none: the end of the keyspace).
    #[serde(with = "serde_bytes")]
    pub end: Option<Vec<u8>>,
}

/// The keys of a retired range, taken into the range on its left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbsorbRange {
    /// The absorbing range's bounds as the proposer saw them: the entry
    /// applies only to those (a split or another merge meanwhile makes
    /// it refused, changing nothing).
    pub expect: Bounds,
    /// The retired range's id.
    pub right: RangeId,
    /// The retired range's end: the merged range's (none: the end of the
    /// keyspace). Its start is `expect`'s end.
    #[serde(with = "serde_bytes")]
    pub end: Option<Vec<u8>>,
    /// The merged range's epoch version, as the map gave it.
    pub version: u64,
    /// The retired range's store clock: the merged store's starts above
    /// it, so that every later write takes a newer version than any key
    /// taken.
    pub clock: u64,
    /// The retired range's keys, in key order.
    pub items: Vec<MergedItem>,
}

/// One key of a retired range, as it stood (and an item as a remote read
/// answers it, `rpc::RemoteItem`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergedItem {
    /// The key.
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    /// Its value.
    #[serde(with = "serde_bytes")]
    pub value: Vec<u8>,
    /// Its version (its CAS token).
    pub version: u64,
    /// When it expires (unix ms), if it does.
    pub expires_at_ms: Option<u64>,
    /// Its client flags.
    pub flags: u32,
}
