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

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use combkv::durable::FaultyStorage;
use combkv::op::{Cond, Op};
use combkv::{Expiry, Flags, Range};
use combkv_replica::network::sim::{Faults, SimNet};
use combkv_replica::{GroupId, Host, LogOptions, Replica, ReplicaConfig, SyncPolicy, codec};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const NODES: u64 = 3;
/// Group 0 is the one a one-keyspace cluster has; 7 any other.
const GROUPS: [GroupId; 2] = [0, 7];
const WRITES_PER_GROUP: usize = 40;

fn config(dir: &Path, id: u64, group: GroupId, storage: &FaultyStorage) -> ReplicaConfig {
    let mut c = ReplicaConfig::new(
        id,
        format!("127.0.0.{id}:7000").parse().unwrap(),
        dir.join(format!("node{id}/group{group}")),
    );
    c.log = LogOptions {
        segment_bytes: 4096,
        sync: SyncPolicy::Always,
        inline: true,
        cache_bytes: 4 << 10,
        ..LogOptions::default()
    };
    c.log_storage = Some(Arc::new(storage.clone()));
    c.snapshot_entries = 30;
    c.log_keep_entries = 5;
    c
}

struct Cluster {
    dir: std::path::PathBuf,
    net: SimNet,
    /// Each node's host, and each group's replica on it.
    nodes: Mutex<HashMap<u64, Host>>,
    /// Each (node, group)'s log's file system, kept across restarts.
    storage: HashMap<(u64, GroupId), FaultyStorage>,
}

impl Cluster {
    fn replica(&self, id: u64, group: GroupId) -> Option<Replica> {
        self.nodes.lock().get(&id).and_then(|h| h.group(group))
    }

    async fn start(&self, id: u64, groups: &[GroupId]) {
        for g in GROUPS {
            let storage = &self.storage[&(id, g)];
            if storage.has_crashed() {
                storage.restart();
            }
        }
        let host = Host::simulated(id, &self.net);
        for &g in groups {
            let c = config(&self.dir, id, g, &self.storage[&(id, g)]);
            host.start_group(g, &c).await.unwrap();
        }
        // A group started twice on one node is refused.
        if let Some(&g) = groups.first() {
            let c = config(&self.dir, id, g, &self.storage[&(id, g)]);
            assert!(host.start_group(g, &c).await.is_err());
        }
        // The groups splits made, from their own directories.
        host.start_split_groups().await.unwrap();
        self.net.set_down(id, false);
        self.nodes.lock().insert(id, host);
    }

    async fn start_group(&self, id: u64, g: GroupId) {
        let host = self.nodes.lock().get(&id).cloned().unwrap();
        let c = config(&self.dir, id, g, &self.storage[&(id, g)]);
        host.start_group(g, &c).await.unwrap();
    }

    /// Crashes node `id`: what its logs (every group's) had not synced is
    /// lost, and it stops at once.
    async fn crash(&self, id: u64) {
        for g in GROUPS {
            self.storage[&(id, g)].crash();
        }
        self.stop(id).await;
    }

    async fn stop(&self, id: u64) {
        let host = self.nodes.lock().remove(&id);
        self.net.set_down(id, true);
        if let Some(host) = host {
            for g in host.groups() {
                host.remove_group(g).unwrap().shutdown().await;
            }
        }
    }
}

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

/// Waits until every replica of `group` has applied its leader's last
/// entry; returns their digests, which must be equal.
async fn converge(cl: &Cluster, group: GroupId) -> Result<(), String> {
    converge_on(cl, group, &(1..=NODES).collect::<Vec<_>>()).await
}

/// [`converge`] over the replicas on `on`.
async fn converge_on(cl: &Cluster, group: GroupId, on: &[u64]) -> Result<(), String> {
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let nodes: Vec<Replica> = on.iter().filter_map(|&id| cl.replica(id, group)).collect();
        let Some(leader) = nodes.iter().find(|n| n.is_leader()) else {
            continue;
        };
        let last = leader.status().last_log_index;
        let digests: Vec<_> = nodes.iter().map(|n| n.digest().unwrap()).collect();
        if nodes.len() == on.len()
            && digests
                .iter()
                .all(|(at, _)| at.is_some_and(|(_, i)| i == last))
        {
            if digests.iter().any(|d| d.1 != digests[0].1) {
                return Err(format!(
                    "group {group}: replicas differ at index {last}: {digests:?}"
                ));
            }
            return Ok(());
        }
    }
    Err(format!("group {group} did not converge"))
}

fn run(seed: u64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("combkv-groups-{}-{seed}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let result = rt.block_on(async {
        let cl = Arc::new(Cluster {
            dir: dir.clone(),
            net: SimNet::new(
                seed,
                Faults {
                    drop_request: 0.05,
                    drop_reply: 0.05,
                    delay_ms: (0, 15),
                },
            ),
            nodes: Mutex::new(HashMap::new()),
            storage: (1..=NODES)
                .flat_map(|id| GROUPS.map(|g| ((id, g), FaultyStorage::new(seed ^ id ^ (g << 8)))))
                .collect(),
        });
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
    let _ = std::fs::remove_dir_all(&dir);
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
    if let Ok(s) = std::env::var("COMBKV_SIM_SEED") {
        return run(s.parse().expect("COMBKV_SIM_SEED is a number"));
    }
    let n: u64 = std::env::var("COMBKV_SIM_SCHEDULES")
        .ok()
        .map_or(12, |s| s.parse().expect("COMBKV_SIM_SCHEDULES is a number"));
    (0..n).for_each(run);
}

/// The meta group (group 0) keeps the range map: made from its first
/// membership, its first range's replicas following its membership,
/// changed only through its log (refused when decided from a stale view,
/// or sent to another group), kept across a restart from a snapshot, and
/// equal on every replica (the digests the convergence compares hold it).
#[test]
fn the_meta_group_keeps_the_range_map_through_its_log() {
    use combkv_replica::ranges::{Epoch, MapChange};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("combkv-groups-map-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    rt.block_on(async {
        let cl = Arc::new(Cluster {
            dir: dir.clone(),
            net: SimNet::new(1, Faults::NONE),
            nodes: Mutex::new(HashMap::new()),
            storage: (1..=NODES + 1)
                .flat_map(|id| GROUPS.map(|g| ((id, g), FaultyStorage::new(id ^ (g << 8)))))
                .collect(),
        });
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
        let leader = loop {
            if let Some(l) = (1..=NODES).find_map(|id| cl.replica(id, 0).filter(|r| r.is_leader()))
            {
                break l;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        leader
            .add_node(
                4,
                "127.0.0.4:7000",
                Duration::from_secs(30),
                std::future::pending(),
            )
            .await
            .unwrap();
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
    let _ = std::fs::remove_dir_all(&dir);
}

fn put_op(k: &[u8], v: &[u8]) -> Vec<u8> {
    let op = Op::Put {
        key: k,
        value: v,
        expiry: Expiry::Never,
        flags: Flags::Set(0),
        cond: Cond::Any,
        return_old: false,
    };
    let mut ops = Vec::new();
    codec::encode_ops(std::slice::from_ref(&op), &mut ops);
    ops
}

fn kv(n: usize) -> Vec<u8> {
    format!("k{n:02}").into_bytes()
}

async fn wait_group(cl: &Cluster, id: u64, g: GroupId) -> Replica {
    for _ in 0..600 {
        if let Some(r) = cl.replica(id, g) {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("node {id} never started group {g}");
}

/// A split of group 0's range at "k20": every replica cuts its range at
/// the same index and starts group 1 with the keys from "k20" on (their
/// values and versions), group 0 then refuses those keys, and group 1
/// serves them. A node cut off during the split catches up with group 0
/// from a snapshot taken after it (so it never applies the split) and
/// gets group 1 from that group's leader, which starts it there empty and
/// sends it a snapshot. A restarted node starts group 1 from its own
/// directory.
#[test]
fn a_split_starts_the_new_range_on_every_replica_even_one_that_missed_it() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("combkv-groups-split-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    rt.block_on(async {
        let cl = Arc::new(Cluster {
            dir: dir.clone(),
            net: SimNet::new(2, Faults::NONE),
            nodes: Mutex::new(HashMap::new()),
            storage: (1..=NODES)
                .flat_map(|id| GROUPS.map(|g| ((id, g), FaultyStorage::new(id ^ (g << 8)))))
                .collect(),
        });
        for id in 1..=NODES {
            cl.start(id, &[0]).await;
        }
        let members: Vec<(u64, String)> = (1..=NODES)
            .map(|id| (id, format!("127.0.0.{id}:7000")))
            .collect();
        cl.replica(1, 0)
            .unwrap()
            .initialize(&members)
            .await
            .unwrap();
        let g0 = cl.replica(1, 0).unwrap();
        for n in 0..40 {
            g0.write(1, put_op(&kv(n), b"before")).await.unwrap();
        }
        let versions: Vec<_> = (20..40)
            .map(|n| {
                g0.current_store()
                    .get_item(&kv(n))
                    .unwrap()
                    .unwrap()
                    .version
            })
            .collect();
        converge(&cl, 0).await.unwrap();

        cl.net.partition(&[&[1, 2], &[3]]);
        let host1 = cl.nodes.lock().get(&1).cloned().unwrap();
        assert_eq!(host1.split(0, b"k20").await.unwrap(), 1);
        // Group 0 holds ["", k20) now: a split at k30 is outside it.
        let outside = host1.split(0, b"k30").await;
        assert!(
            outside
                .as_ref()
                .is_err_and(|e| e.to_string().contains("not strictly inside")),
            "{outside:?}"
        );
        let g1 = wait_group(&cl, 1, 1).await;
        wait_group(&cl, 2, 1).await;
        assert_eq!(g0.bounds().end.as_deref(), Some(&b"k20"[..]));
        assert_eq!(g1.bounds().start, b"k20");
        // Group 0 refuses a key it no longer holds; group 1 takes it.
        let refused = g0.write(1, put_op(b"k25", b"wrong")).await.unwrap();
        assert!(
            matches!(&refused[0], Err(combkv::Error::WrongRange(why)) if why.contains("split")),
            "{refused:?}"
        );
        let g1_on_2 = cl.replica(2, 1).unwrap();
        let mut landed = false;
        for _ in 0..100 {
            if g1_on_2.write(1, put_op(b"k25", b"after")).await.is_ok() {
                landed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(landed, "group 1 took no write");
        // Enough entries in group 0 for node 3 to need a snapshot of it.
        for n in 0..60 {
            g0.write(1, put_op(&kv(n % 20), b"later")).await.unwrap();
        }
        cl.net.heal();
        converge(&cl, 0).await.unwrap();
        wait_group(&cl, 3, 1).await;
        converge(&cl, 1).await.unwrap();
        for id in 1..=NODES {
            let left = cl.replica(id, 0).unwrap().current_store();
            let right = cl.replica(id, 1).unwrap().current_store();
            for n in 0..40 {
                let k = kv(n);
                if n < 20 {
                    assert_eq!(left.get(&k).unwrap().as_deref(), Some(&b"later"[..]));
                    assert_eq!(right.get(&k).unwrap(), None, "node {id} group 1 holds {n}");
                } else {
                    assert_eq!(left.get(&k).unwrap(), None, "node {id} group 0 holds {n}");
                    let want: &[u8] = if n == 25 { b"after" } else { b"before" };
                    let it = right.get_item(&k).unwrap().unwrap();
                    assert_eq!(&it.value[..], want, "node {id} key {n}");
                    if n != 25 {
                        assert_eq!(it.version, versions[n - 20], "node {id} key {n}: CAS token");
                    }
                }
            }
            assert_eq!(
                cl.replica(id, 1).unwrap().bounds().start,
                b"k20",
                "node {id}"
            );
            let map = cl.replica(id, 0).unwrap().range_map().unwrap();
            assert_eq!(map.len(), 2, "node {id}: {map:?}");
            assert_eq!(map.route(b"k25").id, 1);
        }
        // A restart starts group 1 from node 2's own directory.
        cl.stop(2).await;
        cl.start(2, &[0]).await;
        wait_group(&cl, 2, 1).await;
        converge(&cl, 1).await.unwrap();

        // Range 1 splits at k30, asked on a node that need not lead it:
        // the map records it, and range 1's leader follows the map.
        let host = cl.nodes.lock().get(&3).cloned().unwrap();
        let two = host.split(1, b"k30").await.unwrap();
        assert_eq!(two, 2);
        for id in 1..=NODES {
            wait_group(&cl, id, 2).await;
        }
        converge(&cl, 1).await.unwrap();
        converge(&cl, 2).await.unwrap();
        for id in 1..=NODES {
            let one = cl.replica(id, 1).unwrap();
            let two = cl.replica(id, 2).unwrap();
            assert_eq!(one.bounds().end.as_deref(), Some(&b"k30"[..]));
            assert_eq!(
                (two.bounds().start.as_slice(), two.bounds().end),
                (&b"k30"[..], None)
            );
            for n in 20..40 {
                let (holder, other) = if n < 30 { (&one, &two) } else { (&two, &one) };
                assert!(
                    holder.current_store().get(&kv(n)).unwrap().is_some(),
                    "node {id} {n}"
                );
                assert!(
                    other.current_store().get(&kv(n)).unwrap().is_none(),
                    "node {id} {n}"
                );
            }
            let map = cl.replica(id, 0).unwrap().range_map().unwrap();
            assert_eq!(
                map.ranges().map(|r| r.id).collect::<Vec<_>>(),
                vec![0, 1, 2],
                "node {id}"
            );
        }
        // A split outside the range is refused by the map, changing nothing.
        let outside = host.split(1, b"k35").await;
        assert!(outside.is_err(), "{outside:?}");
        for id in 1..=NODES {
            cl.stop(id).await;
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writers keep writing while group 0's range splits, over a network that
/// drops and delays messages and cuts a node off for a while. Each writer
/// owns a key and writes its own increasing values, routing by the range
/// map it reads from a random node and routing again when a group refuses
/// a key outside its range. At the end every key's value, in the group
/// that holds it on every node, is the writer's last acknowledged value
/// or a later one whose answer was lost: no acknowledged write is lost
/// across the split, none lands in the wrong group, and a refused one is
/// never applied. Then every node crashes at once and starts again, which
/// must lose no acknowledged write either.
fn split_under_writers(seed: u64) {
    const KEYS: usize = 8;
    const WRITES: usize = 40;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!(
        "combkv-groups-split-w-{}-{seed}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let result = rt.block_on(async {
        let cl = Arc::new(Cluster {
            dir: dir.clone(),
            net: SimNet::new(
                seed,
                Faults {
                    drop_request: 0.03,
                    drop_reply: 0.03,
                    delay_ms: (0, 10),
                },
            ),
            nodes: Mutex::new(HashMap::new()),
            storage: (1..=NODES)
                .flat_map(|id| GROUPS.map(|g| ((id, g), FaultyStorage::new(seed ^ id ^ (g << 8)))))
                .collect(),
        });
        for id in 1..=NODES {
            cl.start(id, &[0]).await;
        }
        let members: Vec<(u64, String)> = (1..=NODES)
            .map(|id| (id, format!("127.0.0.{id}:7000")))
            .collect();
        cl.replica(1, 0)
            .unwrap()
            .initialize(&members)
            .await
            .unwrap();
        let writers: Vec<_> = (0..KEYS)
            .map(|w| {
                let cl = Arc::clone(&cl);
                tokio::spawn(async move {
                    let mut rng = StdRng::seed_from_u64(seed * 1000 + w as u64);
                    let key = format!("k{w}").into_bytes();
                    let (mut acked, mut sent) = (None, 0);
                    for n in 1..=WRITES {
                        tokio::time::sleep(Duration::from_millis(rng.random_range(0..80))).await;
                        let value = n.to_string().into_bytes();
                        // Routed again after each refusal, up to a bound.
                        for _ in 0..50 {
                            let via = rng.random_range(1..=NODES);
                            let group = cl
                                .replica(via, 0)
                                .and_then(|r| r.range_map())
                                .map_or(0, |m| m.route(&key).id);
                            let Some(r) = cl.replica(via, group) else {
                                tokio::time::sleep(Duration::from_millis(50)).await;
                                continue;
                            };
                            sent = n;
                            match r.write(1, put_op(&key, &value)).await {
                                Ok(res) => match &res[0] {
                                    Ok(_) => {
                                        acked = Some(n);
                                        break;
                                    }
                                    Err(combkv::Error::WrongRange(_)) => {
                                        tokio::time::sleep(Duration::from_millis(20)).await;
                                    }
                                    Err(e) => panic!("write {n} of k{w}: {e}"),
                                },
                                // Lost or refused before the log: maybe
                                // applied; the next value follows it.
                                Err(_) => break,
                            }
                        }
                    }
                    (key, acked, sent)
                })
            })
            .collect();
        // The split, while they write; node 3 cut off around it.
        tokio::time::sleep(Duration::from_millis(300)).await;
        cl.net.partition(&[&[1, 2], &[3]]);
        let mut split = false;
        for _ in 0..50 {
            let via = (1..=2).find(|&id| cl.replica(id, 0).is_some_and(|r| r.is_leader()));
            let host = via.and_then(|id| cl.nodes.lock().get(&id).cloned());
            if let Some(h) = host
                && h.split(0, b"k4").await.is_ok()
            {
                split = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !split {
            return Err("the split never applied".to_string());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        cl.net.heal();
        // Then every node crashes at once, losing what it had not synced,
        // and starts again (group 1 from its own directory).
        let mut rng = StdRng::seed_from_u64(seed ^ 0xc0ffee);
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..400))).await;
        for id in 1..=NODES {
            cl.crash(id).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..300))).await;
        for id in 1..=NODES {
            cl.start(id, &[0]).await;
        }
        let mut outcomes = Vec::new();
        for w in writers {
            outcomes.push(w.await.unwrap());
        }
        cl.net.set_faults(Faults::NONE);
        for g in GROUPS[..1].iter().copied().chain([1]) {
            for id in 1..=NODES {
                wait_group(&cl, id, g).await;
            }
            converge(&cl, g).await?;
        }
        for (key, acked, sent) in &outcomes {
            let owner: GroupId = if key.as_slice() < b"k4".as_slice() {
                0
            } else {
                1
            };
            for id in 1..=NODES {
                for g in [0, 1] {
                    let got = cl.replica(id, g).unwrap().current_store().get(key).unwrap();
                    if g != owner {
                        if got.is_some() {
                            return Err(format!("node {id} group {g} holds {key:?}"));
                        }
                        continue;
                    }
                    let v: usize = got
                        .map(|v| std::str::from_utf8(&v).unwrap().parse().unwrap())
                        .unwrap_or(0);
                    let floor = acked.unwrap_or(0);
                    if v < floor || v > *sent {
                        return Err(format!(
                            "node {id}: {} is {v}, acknowledged up to {floor}, sent up to {sent}",
                            String::from_utf8_lossy(key)
                        ));
                    }
                }
            }
        }
        for id in 1..=NODES {
            cl.stop(id).await;
        }
        Ok(outcomes.iter().filter_map(|o| o.1).sum::<usize>())
    });
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Err(e) => panic!("seed {seed} failed (rerun: COMBKV_SIM_SEED={seed}): {e}"),
        Ok(n) => eprintln!("seed {seed}: acknowledged values summed {n}"),
    }
}

#[test]
fn a_split_under_writers_loses_no_acknowledged_write() {
    if let Ok(s) = std::env::var("COMBKV_SIM_SEED") {
        return split_under_writers(s.parse().expect("COMBKV_SIM_SEED is a number"));
    }
    let n: u64 = std::env::var("COMBKV_SIM_SCHEDULES")
        .ok()
        .map_or(12, |s| s.parse().expect("COMBKV_SIM_SCHEDULES is a number"));
    (0..n).for_each(split_under_writers);
}

/// A range moves: the map is told to hold range 1 on nodes 1, 2 and 4
/// instead of 1, 2 and 3, and range 1's leader follows it: node 4 (a new
/// member of the cluster) is added as a learner, starts its replica on the
/// leader's first message (the map names it), gets a snapshot, catches up
/// and votes; only then is node 3 removed. Range 0 stays on its members.
#[test]
fn a_range_moves_to_the_replicas_the_map_names() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("combkv-groups-move-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    rt.block_on(async {
        let cl = Arc::new(Cluster {
            dir: dir.clone(),
            net: SimNet::new(3, Faults::NONE),
            nodes: Mutex::new(HashMap::new()),
            storage: (1..=NODES + 1)
                .flat_map(|id| GROUPS.map(|g| ((id, g), FaultyStorage::new(id ^ (g << 8)))))
                .collect(),
        });
        for id in 1..=NODES {
            cl.start(id, &[0]).await;
        }
        let members: Vec<(u64, String)> = (1..=NODES)
            .map(|id| (id, format!("127.0.0.{id}:7000")))
            .collect();
        cl.replica(1, 0)
            .unwrap()
            .initialize(&members)
            .await
            .unwrap();
        let g0 = cl.replica(1, 0).unwrap();
        for n in 0..40 {
            g0.write(1, put_op(&kv(n), b"v")).await.unwrap();
        }
        let host1 = cl.nodes.lock().get(&1).cloned().unwrap();
        assert_eq!(host1.split(0, b"k20").await.unwrap(), 1);
        for id in 1..=NODES {
            wait_group(&cl, id, 1).await;
        }
        // Node 4 joins the cluster (group 0), then range 1 is moved.
        cl.start(4, &[0]).await;
        let leader = loop {
            if let Some(l) = (1..=NODES).find_map(|id| cl.replica(id, 0).filter(|r| r.is_leader()))
            {
                break l;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        leader
            .add_node(
                4,
                "127.0.0.4:7000",
                Duration::from_secs(30),
                std::future::pending(),
            )
            .await
            .unwrap();
        host1.set_replicas(1, vec![1, 2, 4], vec![]).await.unwrap();
        // The map refuses to be told range 0's replicas.
        assert!(host1.set_replicas(0, vec![1], vec![]).await.is_err());
        let mut moved = false;
        for _ in 0..600 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let Some(l) = [1, 2, 4]
                .into_iter()
                .find_map(|id| cl.replica(id, 1).filter(|r| r.is_leader()))
            else {
                continue;
            };
            let mut voters: Vec<u64> = l
                .status()
                .nodes
                .iter()
                .filter(|n| n.2)
                .map(|n| n.0)
                .collect();
            voters.sort_unstable();
            if voters == [1, 2, 4] && l.status().nodes.len() == 3 {
                moved = true;
                break;
            }
        }
        assert!(moved, "range 1 did not move");
        // Node 4's replica holds range 1's keys, equal to the others'.
        let last = [1, 2, 4]
            .into_iter()
            .find_map(|id| cl.replica(id, 1).filter(|r| r.is_leader()))
            .unwrap()
            .status()
            .last_log_index;
        let mut digests = Vec::new();
        for id in [1, 2, 4] {
            let r = wait_group(&cl, id, 1).await;
            assert!(
                r.wait_applied(last, Duration::from_secs(30)).await,
                "node {id}"
            );
            digests.push(r.digest().unwrap());
            for n in 20..40 {
                assert!(
                    r.current_store().get(&kv(n)).unwrap().is_some(),
                    "node {id} {n}"
                );
            }
        }
        assert!(digests.windows(2).all(|w| w[0] == w[1]), "{digests:?}");
        // The map says where range 1 is, and range 0 is untouched.
        let map = cl.replica(4, 0).unwrap().range_map().unwrap();
        assert_eq!(map.get(1).unwrap().voters, vec![1, 2, 4]);
        assert_eq!(map.get(0).unwrap().voters, vec![1, 2, 3, 4]);
        for id in 1..=NODES + 1 {
            cl.stop(id).await;
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// Five nodes; the keyspace splits into three ranges and one of them
/// moves to three of the five nodes while writers and readers run over a
/// network that drops and delays messages, with a node cut off for a
/// while and then every node crashing at once. Each client owns a key:
/// it writes increasing values, routing by the map it reads from a random
/// node, and after each acknowledged write reads the key back through
/// the range's group on a random node (a read index, then the key if the
/// group still holds it, else routing again): a read must see its own
/// last acknowledged write or a later one (whose answer was lost), never
/// an older value. At the end every key is in exactly one group's stores,
/// on every replica of that group, at the last acknowledged value or a
/// later one; replicas of each group are equal at the same index.
fn ranges_under_faults(seed: u64) {
    const FIVE: u64 = 5;
    const KEYS: usize = 9;
    const WRITES: usize = 30;
    let all: Vec<u64> = (1..=FIVE).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let dir =
        std::env::temp_dir().join(format!("combkv-groups-five-{}-{seed}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let result = rt.block_on(async {
        let cl = Arc::new(Cluster {
            dir: dir.clone(),
            net: SimNet::new(
                seed,
                Faults {
                    drop_request: 0.02,
                    drop_reply: 0.02,
                    delay_ms: (0, 8),
                },
            ),
            nodes: Mutex::new(HashMap::new()),
            storage: (1..=FIVE)
                .flat_map(|id| GROUPS.map(|g| ((id, g), FaultyStorage::new(seed ^ id ^ (g << 8)))))
                .collect(),
        });
        for &id in &all {
            cl.start(id, &[0]).await;
        }
        let members: Vec<(u64, String)> = all
            .iter()
            .map(|&id| (id, format!("127.0.0.{id}:7000")))
            .collect();
        cl.replica(1, 0)
            .unwrap()
            .initialize(&members)
            .await
            .unwrap();
        let clients: Vec<_> = (0..KEYS)
            .map(|w| {
                let cl = Arc::clone(&cl);
                tokio::spawn(async move {
                    let mut rng = StdRng::seed_from_u64(seed * 1000 + w as u64);
                    let key = format!("k{w}").into_bytes();
                    let (mut acked, mut sent) = (0usize, 0usize);
                    let route = |rng: &mut StdRng| {
                        let via = rng.random_range(1..=FIVE);
                        let group = cl
                            .replica(via, 0)
                            .and_then(|r| r.range_map())
                            .map_or(0, |m| m.route(&key).id);
                        cl.replica(via, group)
                    };
                    for n in 1..=WRITES {
                        tokio::time::sleep(Duration::from_millis(rng.random_range(0..80))).await;
                        let value = n.to_string().into_bytes();
                        for _ in 0..50 {
                            let Some(r) = route(&mut rng) else {
                                tokio::time::sleep(Duration::from_millis(50)).await;
                                continue;
                            };
                            sent = n;
                            match r.write(1, put_op(&key, &value)).await {
                                Ok(res) => match &res[0] {
                                    Ok(_) => {
                                        acked = n;
                                        break;
                                    }
                                    Err(combkv::Error::WrongRange(_)) => {
                                        tokio::time::sleep(Duration::from_millis(20)).await;
                                    }
                                    Err(e) => panic!("write {n} of k{w}: {e}"),
                                },
                                Err(_) => break,
                            }
                        }
                        // Read it back, linearizably, wherever it is now.
                        for _ in 0..20 {
                            let Some(r) = route(&mut rng) else {
                                tokio::time::sleep(Duration::from_millis(50)).await;
                                continue;
                            };
                            if r.read_barrier().await.is_err() {
                                continue;
                            }
                            if !r.bounds().contains(&key) {
                                continue;
                            }
                            let got: usize =
                                r.current_store().get(&key).unwrap().map_or(0, |v| {
                                    std::str::from_utf8(&v).unwrap().parse().unwrap()
                                });
                            assert!(
                                got >= acked && got <= sent,
                                "k{w}: read {got} after acknowledged {acked} (sent {sent}) \
                                 via node {} group {}",
                                r.id(),
                                r.bounds().id
                            );
                            break;
                        }
                    }
                    (key, acked, sent)
                })
            })
            .collect();
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
        let host = |id: u64| cl.nodes.lock().get(&id).cloned();
        // Two splits, then range 1 moves to three of the five nodes.
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..400))).await;
        cl.net.partition(&[&[1, 2, 3, 4], &[5]]);
        for (range, at) in [(0, &b"k3"[..]), (1, b"k6")] {
            let mut done = false;
            for _ in 0..100 {
                let via = rng.random_range(1..=4);
                if let Some(h) = host(via)
                    && h.split(range, at).await.is_ok()
                {
                    done = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if !done {
                return Err(format!("range {range} never split at {at:?}"));
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..500))).await;
        cl.net.heal();
        let mut moved = false;
        for _ in 0..100 {
            let via = rng.random_range(1..=FIVE);
            if let Some(h) = host(via)
                && h.set_replicas(1, vec![2, 4, 5], vec![]).await.is_ok()
            {
                moved = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !moved {
            return Err("range 1 was never told its new nodes".into());
        }
        // Every node crashes at once, then starts again.
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..800))).await;
        for &id in &all {
            cl.crash(id).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..300))).await;
        for &id in &all {
            cl.start(id, &[0]).await;
        }
        let mut outcomes = Vec::new();
        for c in clients {
            outcomes.push(c.await.map_err(|e| format!("a client failed: {e}"))?);
        }
        cl.net.set_faults(Faults::NONE);
        // Range 1 ends on nodes 2, 4 and 5 only.
        let mut placed = false;
        for _ in 0..600 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if let Some(l) = all
                .iter()
                .find_map(|&id| cl.replica(id, 1).filter(|r| r.is_leader()))
            {
                let mut m: Vec<u64> = l.status().nodes.iter().map(|n| n.0).collect();
                m.sort_unstable();
                if m == [2, 4, 5] {
                    placed = true;
                    break;
                }
            }
        }
        if !placed {
            return Err("range 1 never reached nodes 2, 4 and 5".into());
        }
        let holders = |g: GroupId| -> Vec<u64> { if g == 1 { vec![2, 4, 5] } else { all.clone() } };
        for g in [0, 1, 2] {
            for id in holders(g) {
                wait_group(&cl, id, g).await;
            }
            converge_on(&cl, g, &holders(g)).await?;
        }
        let map = cl.replica(1, 0).unwrap().range_map().unwrap();
        for (key, acked, sent) in &outcomes {
            let owner = map.route(key).id;
            for g in [0, 1, 2] {
                for id in holders(g) {
                    let r = cl.replica(id, g).unwrap();
                    let got = r.current_store().get(key).unwrap();
                    if g != owner {
                        if got.is_some() {
                            return Err(format!("node {id} group {g} holds {key:?}"));
                        }
                        continue;
                    }
                    let v: usize = got
                        .map(|v| std::str::from_utf8(&v).unwrap().parse().unwrap())
                        .unwrap_or(0);
                    if v < *acked || v > *sent {
                        return Err(format!(
                            "node {id}: {} is {v}, acknowledged up to {acked}, sent up to {sent}",
                            String::from_utf8_lossy(key)
                        ));
                    }
                }
            }
        }
        for &id in &all {
            cl.stop(id).await;
        }
        Ok(outcomes.iter().map(|o| o.1).sum::<usize>())
    });
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Err(e) => panic!("seed {seed} failed (rerun: COMBKV_SIM_SEED={seed}): {e}"),
        Ok(n) => eprintln!("seed {seed}: acknowledged values summed {n}"),
    }
}

#[test]
fn five_nodes_split_and_move_ranges_under_faults_and_lose_nothing() {
    if let Ok(s) = std::env::var("COMBKV_SIM_SEED") {
        return ranges_under_faults(s.parse().expect("COMBKV_SIM_SEED is a number"));
    }
    let n: u64 = std::env::var("COMBKV_SIM_SCHEDULES")
        .ok()
        .map_or(8, |s| s.parse().expect("COMBKV_SIM_SCHEDULES is a number"));
    (0..n).for_each(ranges_under_faults);
}

/// Ranges split by size on their own: with `split_bytes` set, writers
/// filling the keyspace make the ranges' leaders split them at their
/// middle keys (each split recorded in the map, each new range splitting
/// further as it grows), and every key ends in exactly one range, with its
/// value, on every replica.
#[test]
fn ranges_split_by_size_on_their_own() {
    const KEYS: usize = 3000;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("combkv-groups-size-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    rt.block_on(async {
        let cl = Arc::new(Cluster {
            dir: dir.clone(),
            net: SimNet::new(4, Faults::NONE),
            nodes: Mutex::new(HashMap::new()),
            storage: (1..=NODES)
                .flat_map(|id| GROUPS.map(|g| ((id, g), FaultyStorage::new(id ^ (g << 8)))))
                .collect(),
        });
        for id in 1..=NODES {
            let host = Host::simulated(id, &cl.net);
            let mut c = config(&cl.dir, id, 0, &cl.storage[&(id, 0)]);
            c.split_bytes = 128 << 10;
            host.start_group(0, &c).await.unwrap();
            cl.nodes.lock().insert(id, host);
        }
        let members: Vec<(u64, String)> = (1..=NODES)
            .map(|id| (id, format!("127.0.0.{id}:7000")))
            .collect();
        cl.replica(1, 0)
            .unwrap()
            .initialize(&members)
            .await
            .unwrap();
        let value = vec![b'v'; 100];
        for n in 0..KEYS {
            // Keys spread over the keyspace, written in a scrambled order.
            let k = format!("key{:06}", (n * 7919) % KEYS).into_bytes();
            for attempt in 0.. {
                if attempt >= 500 {
                    let map = cl.replica(1, 0).unwrap().range_map().unwrap();
                    let mut said = String::new();
                    for r in map.ranges() {
                        said.push_str(&format!("\n  map: {r}"));
                    }
                    for id in 1..=NODES {
                        let host = cl.nodes.lock().get(&id).cloned().unwrap();
                        for g in host.groups() {
                            let r = host.group(g).unwrap();
                            said.push_str(&format!(
                                "\n  node {id} group {g}: {} leader {} keys {}",
                                r.bounds(),
                                r.is_leader(),
                                r.current_store().len()
                            ));
                        }
                    }
                    panic!("key {n} never written:{said}");
                }
                let Some(map) = cl.replica(1, 0).unwrap().range_map() else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let g = map.route(&k).id;
                let Some(r) = cl.replica(1, g) else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                match r.write(1, put_op(&k, &value)).await {
                    Ok(res) if res[0].is_ok() => break,
                    _ => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        let map = cl.replica(1, 0).unwrap().range_map().unwrap();
        eprintln!("{} ranges", map.len());
        for r in map.ranges() {
            eprintln!("  {r}");
        }
        assert!(map.len() >= 4, "{} ranges", map.len());
        for r in map.ranges() {
            for id in 1..=NODES {
                wait_group(&cl, id, r.id).await;
            }
            converge(&cl, r.id).await.unwrap();
        }
        let mut counts = Vec::new();
        for r in map.ranges() {
            let store = cl.replica(2, r.id).unwrap().current_store();
            counts.push(store.len());
            let bounds = cl.replica(2, r.id).unwrap().bounds();
            assert_eq!(
                (bounds.start.clone(), bounds.end.clone()),
                (r.start.clone(), r.end.clone())
            );
        }
        eprintln!("keys per range: {counts:?}");
        assert_eq!(counts.iter().sum::<u64>(), KEYS as u64);
        for n in 0..KEYS {
            let k = format!("key{n:06}").into_bytes();
            let g = map.route(&k).id;
            let got = cl.replica(3, g).unwrap().current_store().get(&k).unwrap();
            assert_eq!(got.as_deref(), Some(&value[..]), "key {n} in range {g}");
        }
        for id in 1..=NODES {
            cl.stop(id).await;
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}
