//! The Raft group's types: what an entry carries, what applying it answers,
//! and the openraft type configuration that names them.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A node's id in the cluster (`--node-id`), never 0.
pub type NodeId = u64;

/// One entry's application data: the decided writes of one proposal (an
/// event-loop turn's writes from every connection, grouped so that they
/// share one log append and one quorum round), and the leader's clock.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    /// The leader's clock when it proposed the batch, in unix ms, never
    /// below the clock of an entry before it. Apply judges expiry against
    /// it and never reads a wall clock, so every replica decides alike.
    pub now_ms: u64,
    /// The decided writes, encoded by [`crate::codec`]. Serialized as one
    /// byte string, not a sequence of bytes one call each (postcard writes
    /// both alike, so the log's format is the same).
    #[serde(with = "serde_bytes")]
    pub ops: Vec<u8>,
}

impl fmt::Debug for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("now_ms", &self.now_ms)
            .field("op_bytes", &self.ops.len())
            .finish()
    }
}

impl fmt::Display for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "batch at {} ms ({} bytes)", self.now_ms, self.ops.len())
    }
}

/// What applying an entry answered: one result per op of its batch,
/// encoded by [`crate::codec`] (empty for entries that carry no batch).
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    #[serde(with = "serde_bytes")]
    pub results: Vec<u8>,
}

impl fmt::Debug for Applied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Applied({} bytes)", self.results.len())
    }
}

openraft::declare_raft_types!(
    /// combkv's Raft type configuration.
    pub TypeConfig:
        D = Batch,
        R = Applied,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        // Snapshots are checkpoint files, streamed from and to disk.
        SnapshotData = tokio::fs::File,
        AsyncRuntime = openraft::TokioRuntime,
);

pub(crate) type Entry = openraft::Entry<TypeConfig>;
pub(crate) type LogId = openraft::LogId<NodeId>;
pub(crate) type Vote = openraft::Vote<NodeId>;
pub(crate) type StorageError = openraft::StorageError<NodeId>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Logs written before `ops` was a byte string hold it as a sequence
    /// of bytes; postcard must write both alike, or those logs would no
    /// longer read.
    #[test]
    fn a_batch_encodes_as_it_did_as_a_sequence_of_bytes() {
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct OldBatch {
            now_ms: u64,
            ops: Vec<u8>,
        }
        for len in [0usize, 1, 127, 128, 300, 70_000] {
            let ops: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let old = OldBatch {
                now_ms: 1_700_000_000_123,
                ops: ops.clone(),
            };
            let new = Batch {
                now_ms: old.now_ms,
                ops,
            };
            let old_bytes = postcard::to_stdvec(&old).unwrap();
            assert_eq!(postcard::to_stdvec(&new).unwrap(), old_bytes);
            assert_eq!(postcard::from_bytes::<Batch>(&old_bytes).unwrap(), new);
            let applied = Applied {
                results: new.ops.clone(),
            };
            let old_results = postcard::to_stdvec(&new.ops).unwrap();
            assert_eq!(postcard::to_stdvec(&applied).unwrap(), old_results);
        }
    }
}
