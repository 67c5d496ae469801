//! The Raft group's types: what an entry carries, what applying it answers,
//! and the openraft type configuration that names them.

use std::fmt;

use combkv::Error;
use combkv::op::Outcome;
use serde::{Deserialize, Serialize};

/// A node's id in the cluster (`--node-id`), never 0.
pub type NodeId = u64;

/// A Raft group's id among the groups a node hosts. Group 0 is the one a
/// cluster of one keyspace has always had: its messages go between nodes
/// as they always did, without the id.
pub type GroupId = u64;

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

impl Batch {
    /// A batch of no ops (what a proposal's batch leaves when taken).
    pub(crate) fn empty() -> Batch {
        Batch {
            now_ms: 0,
            ops: Vec::new(),
        }
    }
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

/// What applying an entry answered: one result per op of its batch, in
/// order (none for entries that carry no batch). On the leader these reach
/// the waiting clients as they are; they become bytes ([`crate::codec`])
/// only to cross the network, as the answer to a forwarded batch.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// The results, one per op.
    pub results: Vec<Result<Outcome, Error>>,
}

impl fmt::Debug for Applied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Applied({} results)", self.results.len())
    }
}

/// openraft asks that an entry's answer can be serialized; it is written
/// as the byte string of its encoded results, as it always was.
impl Serialize for Applied {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut bytes = Vec::new();
        for r in &self.results {
            crate::codec::encode_result(r, &mut bytes);
        }
        s.serialize_bytes(&bytes)
    }
}

impl<'de> Deserialize<'de> for Applied {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Applied, D::Error> {
        let bytes: serde_bytes::ByteBuf = Deserialize::deserialize(d)?;
        let results = crate::codec::decode_results(&bytes).map_err(serde::de::Error::custom)?;
        Ok(Applied { results })
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
        }
        // An answer is the byte string of its encoded results.
        let applied = Applied {
            results: vec![Ok(Outcome::Clear), Err(Error::NotAnInteger)],
        };
        let mut bytes = Vec::new();
        for r in &applied.results {
            crate::codec::encode_result(r, &mut bytes);
        }
        let encoded = postcard::to_stdvec(&applied).unwrap();
        assert_eq!(encoded, postcard::to_stdvec(&bytes).unwrap());
        assert_eq!(postcard::from_bytes::<Applied>(&encoded).unwrap(), applied);
    }
}
