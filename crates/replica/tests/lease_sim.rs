//! Reads under the leader's lease in the case `cluster_sim`'s random
//! schedules hardly reach: a follower that accepted the leader's appends
//! restarts at once, having forgotten when it last did. Were it to vote
//! at once, the one node it shares with a candidate the leader cannot
//! reach would elect that candidate inside the lease, and the old leader
//! would serve reads from its lease that miss the new leader's writes.
//! openraft takes the committed vote a node finds saved at its start as
//! renewed then, so the node grants no vote for a lease after it (and,
//! while the leader's appends reach it, refuses the candidate for good).
//! The lease reads rest on that; this test keeps it true.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use combkv::op::{Cond, Op};
use combkv::{Expiry, Flags};
use combkv_replica::network::sim::{Faults, SimNet};
use combkv_replica::{Replica, ReplicaConfig, Role, codec};
use parking_lot::Mutex;

const NODES: u64 = 3;

fn config(dir: &Path, id: u64) -> ReplicaConfig {
    let mut c = ReplicaConfig::new(
        id,
        format!("127.0.0.{id}:7000").parse().unwrap(),
        dir.join(format!("node{id}")),
    );
    c.log.inline = true;
    c
}

fn put(value: &str) -> Vec<u8> {
    let op = Op::Put {
        key: b"k",
        value: value.as_bytes(),
        expiry: Expiry::Never,
        flags: Flags::Set(0),
        cond: Cond::Any,
        return_old: false,
    };
    let mut bytes = Vec::new();
    codec::encode_ops(std::slice::from_ref(&op), &mut bytes);
    bytes
}

fn value(r: &Replica) -> Option<Vec<u8>> {
    r.current_store().get(b"k").unwrap().map(|v| v.to_vec())
}

async fn leader(nodes: &Mutex<Vec<Replica>>) -> u64 {
    for _ in 0..100 {
        let found = nodes
            .lock()
            .iter()
            .find(|n| n.status().role == Role::Leader)
            .map(Replica::id);
        if let Some(id) = found {
            return id;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no leader");
}

#[test]
fn a_follower_restarted_inside_the_lease_elects_no_one_and_no_read_is_stale() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("combkv-lease-sim-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    rt.block_on(async {
        let net = SimNet::new(
            7,
            Faults {
                drop_request: 0.0,
                drop_reply: 0.0,
                delay_ms: (1, 3),
            },
        );
        let mut started = Vec::new();
        for id in 1..=NODES {
            started.push(
                Replica::start_simulated(&config(&dir, id), &net)
                    .await
                    .unwrap(),
            );
        }
        let nodes = Arc::new(Mutex::new(started));
        let members: Vec<(u64, String)> = (1..=NODES)
            .map(|id| (id, format!("127.0.0.{id}:7000")))
            .collect();
        let first = nodes.lock()[0].clone();
        first.initialize(&members).await.unwrap();
        let l = leader(&nodes).await;
        let node = |id: u64| nodes.lock()[id as usize - 1].clone();
        let (f1, f2) = match l {
            1 => (2, 3),
            2 => (1, 3),
            _ => (1, 2),
        };
        // Every write acknowledged is read back at every node: a
        // follower's read index, which the leader now gives from its
        // lease, covers it.
        for i in 0..50 {
            let v = format!("w{i}");
            node(l).write(10 + i, put(&v)).await.unwrap();
            for f in [l, f1, f2] {
                node(f).read_barrier().await.unwrap();
                assert_eq!(value(&node(f)).as_deref(), Some(v.as_bytes()), "node {f}");
            }
        }
        let leased = node(l).status().read_indexes_leased;
        assert!(leased > 0, "no read index was given from the lease");
        node(l).write(100, put("v1")).await.unwrap();
        node(f2).read_barrier().await.unwrap();
        assert_eq!(value(&node(f2)).as_deref(), Some(&b"v1"[..]));

        // The leader no longer reaches f2, which stands again and again;
        // f1, which the leader's appends still reach, refuses it (by its
        // lease: f2's log is as long as the others').
        net.cut(l, f2);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(node(l).status().role, Role::Leader);

        // f1 restarts at once, cut from the leader for less than a lease
        // (the leader holds its lease from f1's last answers meanwhile),
        // then f2 tries to write through itself (its write is acknowledged
        // only once it leads). It must not lead: f1 refuses it for a lease
        // after its start (openraft renews the vote it finds saved), and
        // then while the leader's appends reach it again.
        net.cut(l, f1);
        node(f1).shutdown().await;
        let restarted = Replica::start_simulated(&config(&dir, f1), &net)
            .await
            .unwrap();
        nodes.lock()[f1 as usize - 1] = restarted;
        let writer = node(f2);
        let write = tokio::spawn(async move { writer.write(200, put("v2")).await });
        let mended = tokio::time::Instant::now() + Duration::from_millis(500);
        let until = tokio::time::Instant::now() + Duration::from_secs(5);
        while tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
            if tokio::time::Instant::now() >= mended {
                net.uncut(l, f1);
            }
            assert_ne!(
                node(f2).status().role,
                Role::Leader,
                "node {f2} was elected inside the lease of node {l} with the vote of \
                 node {f1}, restarted"
            );
            assert!(
                !write.is_finished(),
                "a write through node {f2} was acknowledged"
            );
        }
        // The old leader still reads from its lease, and sees v1.
        node(l).read_barrier().await.unwrap();
        assert_eq!(value(&node(l)).as_deref(), Some(&b"v1"[..]));
        assert!(node(l).status().read_indexes_leased > leased);
        // Healed, the cluster goes on: the second write lands.
        net.heal();
        let w = tokio::time::timeout(Duration::from_secs(20), write)
            .await
            .expect("the write ends")
            .unwrap();
        assert!(w.is_ok(), "{w:?}");
        let l = leader(&nodes).await;
        node(l).read_barrier().await.unwrap();
        assert_eq!(value(&node(l)).as_deref(), Some(&b"v2"[..]));
        let all: Vec<Replica> = nodes.lock().drain(..).collect();
        for n in all {
            n.shutdown().await;
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}
