//! The ids that were ever voters (the removed ones are never given to a
//! new node) are the same on a node that applied the membership entries,
//! on a node that installed a snapshot instead, and on a node that
//! restarted from its snapshot: the leader that refuses a removed id may be
//! any of them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use combkv_replica::{StateMachine, TypeConfig};
use openraft::storage::RaftStateMachine;
use openraft::{
    BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, Membership, RaftSnapshotBuilder,
};

fn membership(voters: &[u64], learners: &[u64]) -> Membership<u64, BasicNode> {
    let nodes: BTreeMap<u64, BasicNode> = voters
        .iter()
        .chain(learners)
        .map(|id| (*id, BasicNode::new(format!("127.0.0.1:{}", 7000 + id))))
        .collect();
    Membership::new(vec![voters.iter().copied().collect()], nodes)
}

fn entry(index: u64, m: Membership<u64, BasicNode>) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Membership(m),
    }
}

fn open(dir: &Path) -> StateMachine {
    StateMachine::open(combkv::Config::default(), dir, None).unwrap()
}

#[tokio::test]
async fn removed_voters_are_known_after_a_snapshot_install_and_a_restart() {
    let root = std::env::temp_dir().join(format!("combkv-ever-voters-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mut sm = open(&root.join("a"));
    // Three voters; 4 added as a learner, then a voter; 3 removed; 5 a
    // learner that never voted, then removed.
    sm.apply([
        entry(1, membership(&[1, 2, 3], &[])),
        entry(2, membership(&[1, 2, 3], &[4])),
        entry(3, membership(&[1, 2, 3, 4], &[])),
        entry(4, membership(&[1, 2, 4], &[])),
        entry(5, membership(&[1, 2, 4], &[5])),
        entry(6, membership(&[1, 2, 4], &[])),
    ])
    .await
    .unwrap();
    let want = BTreeSet::from([1, 2, 3, 4]);
    assert_eq!(sm.ever_voters(), want);

    let snap = sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    let mut other = open(&root.join("b"));
    let mut receiving = other.begin_receiving_snapshot().await.unwrap();
    let mut data = snap.snapshot;
    tokio::io::copy(&mut *data, &mut *receiving).await.unwrap();
    other.install_snapshot(&snap.meta, receiving).await.unwrap();
    assert_eq!(other.ever_voters(), want, "after installing the snapshot");

    drop(sm);
    assert_eq!(open(&root.join("a")).ever_voters(), want, "after a restart");
    let _ = std::fs::remove_dir_all(&root);
}
