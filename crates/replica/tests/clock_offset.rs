//! The bound on the nodes' clock offset inside one state machine:
//! - the members' published settings (`clock-offset/<id>`) reach the
//!   node's `ClockOffset` as group 0 applies them, after a snapshot is
//!   installed and after a restart, and a removed member's stops counting;
//! - an entry waiting out the commit wait is not applied, in part or at
//!   all, until the wait ends: a snapshot built meanwhile does not hold it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use combkv_replica::codec::{encode_ops, encode_setting};
use combkv_replica::ranges::{CLOCK_OFFSET_SETTING, ClockOffset};
use combkv_replica::{Batch, StateMachine, TypeConfig};
use openraft::storage::RaftStateMachine;
use openraft::{
    BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, Membership, RaftSnapshotBuilder,
};

fn log_id(index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

fn entry(index: u64, now_ms: u64, ops: Vec<u8>) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(index),
        payload: EntryPayload::Normal(Batch { now_ms, ops }),
    }
}

fn members(index: u64, ids: &[u64]) -> Entry<TypeConfig> {
    let nodes: BTreeMap<u64, BasicNode> = ids
        .iter()
        .map(|&id| (id, BasicNode::new(format!("127.0.0.1:{}", 7000 + id))))
        .collect();
    let voters: BTreeSet<u64> = ids.iter().copied().collect();
    Entry {
        log_id: log_id(index),
        payload: EntryPayload::Membership(Membership::new(vec![voters], nodes)),
    }
}

fn published(index: u64, id: u64, ms: u64) -> Entry<TypeConfig> {
    let name = format!("{CLOCK_OFFSET_SETTING}{id}");
    entry(index, 1, encode_setting(&name, ms.to_string().as_bytes()))
}

fn open(dir: &Path, offset: &ClockOffset) -> StateMachine {
    StateMachine::open(combkv::Config::default(), dir, None)
        .unwrap()
        .with_clock_offset(offset.clone())
}

fn root(name: &str) -> std::path::PathBuf {
    let root = std::env::temp_dir().join(format!("combkv-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    root
}

fn put(key: &[u8]) -> Vec<u8> {
    let mut ops = Vec::new();
    encode_ops(
        &[combkv::op::Op::Put {
            key,
            value: b"v",
            expiry: combkv::Expiry::Never,
            flags: combkv::Flags::Keep,
            cond: combkv::op::Cond::Any,
            return_old: false,
        }],
        &mut ops,
    );
    ops
}

async fn build(sm: &mut StateMachine) -> openraft::Snapshot<TypeConfig> {
    sm.get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap()
}

/// Installs `snap` on `into`, as a follower sent it does.
async fn install(snap: openraft::Snapshot<TypeConfig>, into: &mut StateMachine) {
    let mut receiving = into.begin_receiving_snapshot().await.unwrap();
    let mut data = snap.snapshot;
    tokio::io::copy(&mut *data, &mut *receiving).await.unwrap();
    into.install_snapshot(&snap.meta, receiving).await.unwrap();
}

fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[tokio::test]
async fn members_bounds_are_applied_from_the_log_a_snapshot_and_a_restart() {
    let root = root("clock-offset-published");
    let offset = ClockOffset::new(5);
    let mut sm = open(&root.join("a"), &offset);
    sm.apply([
        members(1, &[1, 2, 3]),
        published(2, 1, 5),
        published(3, 2, 250),
        // Not a member: does not count.
        published(4, 9, 900),
    ])
    .await
    .unwrap();
    assert_eq!(offset.bound_ms(), 250, "a member's larger bound");

    let snap = build(&mut sm).await;
    let other_offset = ClockOffset::new(0);
    let mut other = open(&root.join("b"), &other_offset);
    install(snap, &mut other).await;
    assert_eq!(
        other_offset.bound_ms(),
        250,
        "after installing the snapshot"
    );

    drop(sm);
    let restarted = ClockOffset::new(0);
    let mut sm = open(&root.join("a"), &restarted);
    assert_eq!(restarted.bound_ms(), 250, "after a restart");

    // Node 2 removed: its bound no longer counts.
    sm.apply([members(5, &[1, 3])]).await.unwrap();
    assert_eq!(restarted.bound_ms(), 5, "the largest of the members left");
    assert_eq!(restarted.configured_ms(), 0);
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test]
async fn an_entry_waiting_out_the_bound_is_not_in_a_snapshot_built_meanwhile() {
    const BOUND: u64 = 400;
    let root = root("clock-offset-wait");
    let offset = ClockOffset::new(BOUND);
    let mut sm = open(&root.join("a"), &offset);
    sm.apply([entry(1, wall_ms(), put(b"before"))])
        .await
        .unwrap();
    let mut applying = sm.clone();
    let started = Instant::now();
    let wait = tokio::spawn(async move {
        applying
            .apply([entry(2, wall_ms(), put(b"during"))])
            .await
            .unwrap()
    });
    tokio::time::sleep(Duration::from_millis(BOUND / 4)).await;
    assert!(!wait.is_finished(), "the entry did not wait");
    let snap = build(&mut sm).await;
    assert_eq!(snap.meta.last_log_id, Some(log_id(1)), "built meanwhile");
    assert!(sm.store().get().get(b"before").unwrap().is_some());
    assert!(sm.store().get().get(b"during").unwrap().is_none());
    let applied = wait.await.unwrap();
    assert_eq!(applied[0].results.len(), 1);
    assert!(
        started.elapsed() >= Duration::from_millis(BOUND - 5),
        "answered after {:?}",
        started.elapsed()
    );
    assert!(sm.store().get().get(b"during").unwrap().is_some());

    // The snapshot built during the wait holds the first entry alone.
    let other_offset = ClockOffset::new(BOUND);
    let mut other = open(&root.join("b"), &other_offset);
    install(snap, &mut other).await;
    assert!(other.store().get().get(b"before").unwrap().is_some());
    assert!(other.store().get().get(b"during").unwrap().is_none());
    let _ = std::fs::remove_dir_all(&root);
}
