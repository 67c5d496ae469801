//! Several Raft groups on the same three nodes, over a simulated network
//! that drops, delays and partitions messages, with a node restarted: each
//! group elects its own leader and keeps its own log and store, though
//! every group's messages share each node's one address (a request names
//! its group). Every acknowledged write is on every replica of its group
//! and in no other group, replicas of a group are equal at the same
//! applied index, and a group started on a node late (its peers' messages
//! for it refused meanwhile) catches up.
//!
//! `COMBKV_SIM_SCHEDULES=N` runs N seeds (12 by default); `COMBKV_SIM_SEED=S`
//! the one seed S.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use combkv::Range;
use combkv::op::{Cond, Op};
use combkv::{Expiry, Flags};
use combkv_replica::network::sim::{Faults, SimNet};
use combkv_replica::{GroupId, codec};
use groups::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[allow(dead_code)]
mod groups;

const WRITES_PER_GROUP: usize = 40;

fn key(group: GroupId, n: usize) -> Vec<u8> {
    format!("g{group}-k{n:03}").into_bytes()
}

/// One group's writes, through random nodes; returns the acknowledged
/// writes and those whose answer was lost.
async fn writer(cl: Arc<Cluster>, group: GroupId, seed: u64) -> (Vec<usize>, Vec<usize>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut acked, mut maybe) = (Vec::new(), Vec::new());
    for n in 0..WRITES_PER_GROUP {
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..60))).await;
        let id = rng.random_range(1..=NODES);
        let Some(node) = cl.replica(id, group) else {
            continue;
        };
        let (k, v) = (key(group, n), format!("v{n}").into_bytes());
        let op = Op::Put {
            key: &k,
            value: &v,
            expiry: Expiry::Never,
            flags: Flags::Set(0),
            cond: Cond::Any,
            return_old: false,
        };
        let mut ops = Vec::new();
        codec::encode_ops(std::slice::from_ref(&op), &mut ops);
        match node.write(1, ops).await {
            Ok(results) if results.iter().all(|r| r.is_ok()) => acked.push(n),
            Ok(results) => panic!("group {group} write {n}: {results:?}"),
            Err(_) => maybe.push(n),
        }
    }
    (acked, maybe)
}

/// Partitions node 3 off for a while, then restarts node 2.
async fn nemesis(cl: Arc<Cluster>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xfeed);
    tokio::time::sleep(Duration::from_millis(rng.random_range(200..800))).await;
    cl.net.partition(&[&[1, 2], &[3]]);
    tokio::time::sleep(Duration::from_millis(rng.random_range(500..2500))).await;
    cl.net.heal();
    tokio::time::sleep(Duration::from_millis(rng.random_range(100..600))).await;
    cl.stop(2).await;
    tokio::time::sleep(Duration::from_millis(rng.random_range(100..1500))).await;
    cl.start(2, &GROUPS).await;
}

fn run(seed: u64) {
    let result = simulate(&format!("groups-{seed}"), |dir| async move {
        let cl = Cluster::new(
            dir.clone(),
            SimNet::new(
                seed,
                Faults {
                    drop_request: 0.05,
                    drop_reply: 0.05,
                    delay_ms: (0, 15),
                },
            ),
            NODES,
            seed,
        );
        // Node 3 starts with group 0 only: group 7's messages to it are
        // refused until it starts that group below.
        for id in 1..=NODES {
            let groups: &[GroupId] = if id == 3 { &GROUPS[..1] } else { &GROUPS };
            cl.start(id, groups).await;
        }
        let members: Vec<(u64, String)> = (1..=NODES)
            .map(|id| (id, format!("127.0.0.{id}:7000")))
            .collect();
        for g in GROUPS {
            cl.replica(1, g)
                .unwrap()
                .initialize(&members)
                .await
                .unwrap();
        }
        let nem = tokio::spawn(nemesis(Arc::clone(&cl), seed));
        let writers: Vec<_> = GROUPS
            .iter()
            .map(|&g| tokio::spawn(writer(Arc::clone(&cl), g, seed.wrapping_mul(31) + g)))
            .collect();
        tokio::time::sleep(Duration::from_millis(300)).await;
        cl.start_group(3, 7).await;
        let mut outcomes = BTreeMap::new();
        for (g, w) in GROUPS.iter().zip(writers) {
            outcomes.insert(*g, w.await.unwrap());
        }
        nem.await.unwrap();
        cl.net.set_faults(Faults::NONE);
        for g in GROUPS {
            converge(&cl, g).await?;
        }
        for (g, (acked, maybe)) in &outcomes {
            if acked.len() < WRITES_PER_GROUP / 4 {
                return Err(format!(
                    "group {g}: only {} writes acknowledged",
                    acked.len()
                ));
            }
            for id in 1..=NODES {
                let store = cl.replica(id, *g).unwrap().current_store();
                let items = store.range(&Range::all()).map_err(|e| e.to_string())?;
                for n in acked {
                    let v = store.get(&key(*g, *n)).map_err(|e| e.to_string())?;
                    if v.as_deref() != Some(format!("v{n}").as_bytes()) {
                        return Err(format!(
                            "node {id} group {g}: acknowledged write {n} is {v:?}"
                        ));
                    }
                }
                for it in &items {
                    let k = String::from_utf8_lossy(&it.key).into_owned();
                    let n: usize = k
                        .strip_prefix(&format!("g{g}-k"))
                        .and_then(|n| n.parse().ok())
                        .ok_or_else(|| format!("node {id} group {g} holds {k}"))?;
                    if !acked.contains(&n) && !maybe.contains(&n) {
                        return Err(format!("node {id} group {g} holds unwritten {k}"));
                    }
                }
            }
        }
        for id in 1..=NODES {
            cl.stop(id).await;
        }
        Ok::<_, String>(outcomes)
    });
    match result {
        Err(e) => panic!("seed {seed} failed (rerun: COMBKV_SIM_SEED={seed}): {e}"),
        Ok(o) => eprintln!(
            "seed {seed}: acknowledged/maybe per group {:?}",
            o.iter()
                .map(|(g, (a, m))| (g, a.len(), m.len()))
                .collect::<Vec<_>>()
        ),
    }
}

#[test]
fn groups_share_the_nodes_and_keep_their_own_logs_and_stores() {
    seeds(12).into_iter().for_each(run);
}

/// The meta group (group 0) keeps the range map: made from its first
/// membership, its first range's replicas following its membership,
/// changed only through its log (refused when decided from a stale view,
/// or sent to another group), kept across a restart from a snapshot, and
/// equal on every replica (the digests the convergence compares hold it).
#[test]
fn the_meta_group_keeps_the_range_map_through_its_log() {
    use combkv_replica::ranges::{Epoch, MapChange};
    simulate("groups-map", |dir| async move {
        let cl = Cluster::new(dir.clone(), SimNet::new(1, Faults::NONE), NODES + 1, 0);
        for id in 1..=NODES {
            cl.start(id, &GROUPS).await;
        }
        let members: Vec<(u64, String)> = (1..=NODES)
            .map(|id| (id, format!("127.0.0.{id}:7000")))
            .collect();
        for g in GROUPS {
            cl.replica(1, g)
                .unwrap()
                .initialize(&members)
                .await
                .unwrap();
        }
        converge(&cl, 0).await.unwrap();
        for id in 1..=NODES {
            let map = cl.replica(id, 0).unwrap().range_map().expect("a map");
            assert_eq!(map.len(), 1);
            let r = map.get(0).unwrap();
            assert_eq!(
                (r.voters.clone(), r.epoch),
                (vec![1, 2, 3], Epoch::default())
            );
            assert_eq!(cl.replica(id, 7).unwrap().range_map(), None);
        }
        // A split, proposed on a node that may be a follower.
        let first = cl
            .replica(2, 0)
            .unwrap()
            .range_map()
            .unwrap()
            .get(0)
            .unwrap()
            .clone();
        let split = MapChange::Split {
            range: 0,
            epoch: first.epoch,
            at: b"m".to_vec(),
            new_id: 1,
        };
        cl.replica(2, 0)
            .unwrap()
            .change_ranges(&split)
            .await
            .unwrap();
        // The same change again was decided from a view now stale.
        let again = cl.replica(3, 0).unwrap().change_ranges(&split).await;
        assert!(
            again
                .as_ref()
                .is_err_and(|e| e.to_string().contains("changed since")),
            "{again:?}"
        );
        // Group 7 keeps no map.
        let elsewhere = cl.replica(1, 7).unwrap().change_ranges(&split).await;
        assert!(
            elsewhere
                .as_ref()
                .is_err_and(|e| e.to_string().contains("keeps no range map")),
            "{elsewhere:?}"
        );
        // Enough writes for snapshots, then node 3 restarts from one.
        for n in 0..70 {
            let (k, v) = (key(0, n), b"v".to_vec());
            let op = Op::Put {
                key: &k,
                value: &v,
                expiry: Expiry::Never,
                flags: Flags::Set(0),
                cond: Cond::Any,
                return_old: false,
            };
            let mut ops = Vec::new();
            codec::encode_ops(std::slice::from_ref(&op), &mut ops);
            cl.replica(1, 0).unwrap().write(1, ops).await.unwrap();
        }
        cl.stop(3).await;
        cl.start(3, &GROUPS).await;
        converge(&cl, 0).await.unwrap();
        // A fourth node joins group 0: range 0's replicas follow, its
        // conf_ver the membership's log index.
        cl.start(4, &GROUPS[..1]).await;
        let leader = wait_leader(&cl, 0, &[1, 2, 3]).await;
        add(&leader, 4).await;
        let at = leader.status().last_log_index;
        for id in 1..=NODES + 1 {
            let r = cl.replica(id, 0).unwrap();
            assert!(r.wait_applied(at, Duration::from_secs(10)).await);
            let map = r.range_map().unwrap();
            assert_eq!(map.len(), 2, "node {id}: {map:?}");
            let (left, right) = (map.get(0).unwrap(), map.get(1).unwrap());
            assert_eq!(left.end.as_deref(), Some(&b"m"[..]));
            assert_eq!(right.start, b"m");
            assert_eq!(left.voters.len(), 4, "node {id}: {left}");
            assert!(left.epoch.conf_ver > 0);
            // The new range keeps the replicas it was split with until its
            // own group's changes reach the map.
            assert_eq!(right.voters, vec![1, 2, 3]);
        }
        for id in 1..=NODES + 1 {
            cl.stop(id).await;
        }
    });
}
