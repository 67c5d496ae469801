//! Well-formed requests a stranger could send to a node's Raft port, for
//! checking that the port refuses them (the attacker test in
//! `crates/cli/tests/peer_tls.rs`, or an operator probing a deployment):
//! each is a frame exactly as a node would send it, so a port that took
//! frames from anyone would act on it.

use std::collections::{BTreeMap, BTreeSet};

use combkv::op::{Cond, Op};
use combkv::{Expiry, Flags};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::{BasicNode, Membership, SnapshotMeta, StoredMembership};

use crate::rpc::{self, Request};
use crate::types::{Batch, Entry, LogId, NodeId, Vote};

/// The frames: `(name, bytes)` for a Forward of `SET key value`, a Vote,
/// an Append of one entry that writes `key`, and a Snapshot chunk, each
/// claiming to come from node `from` at `term`.
pub fn frames(from: NodeId, term: u64, key: &[u8], value: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    let batch = || {
        let mut ops = Vec::new();
        crate::codec::encode_ops(
            &[Op::Put {
                key,
                value,
                expiry: Expiry::Never,
                flags: Flags::Keep,
                cond: Cond::Any,
                return_old: false,
            }],
            &mut ops,
        );
        Batch { now_ms: 0, ops }
    };
    let vote = Vote::new_committed(term, from);
    let last = LogId::new(openraft::CommittedLeaderId::new(term, from), 1 << 40);
    let entry = Entry {
        log_id: LogId::new(openraft::CommittedLeaderId::new(term, from), (1 << 40) + 1),
        payload: openraft::EntryPayload::Normal(batch()),
    };
    let members = BTreeMap::from([(from, BasicNode::new("127.0.0.1:1"))]);
    let membership = Membership::new(vec![BTreeSet::from([from])], members);
    let requests = [
        ("forward", Request::Forward(batch())),
        (
            "vote",
            Request::Vote(VoteRequest::new(Vote::new(term, from), Some(last))),
        ),
        (
            "append",
            Request::Append(AppendEntriesRequest {
                vote,
                prev_log_id: Some(last),
                entries: vec![entry],
                leader_commit: Some(last),
            }),
        ),
        (
            "snapshot",
            Request::Snapshot(InstallSnapshotRequest {
                vote,
                meta: SnapshotMeta {
                    last_log_id: Some(last),
                    last_membership: StoredMembership::new(Some(last), membership),
                    snapshot_id: "probe".into(),
                },
                offset: 0,
                data: vec![0; 64],
                done: true,
            }),
        ),
    ];
    requests
        .into_iter()
        .map(|(name, r)| (name, rpc::encode(&r).expect("a small request encodes")))
        .collect()
}
