//! What the simulated tests of many groups share: nodes that each host
//! their groups behind one simulated address, each group's log on a file
//! system that loses what was not synced when it crashes, and waits for
//! groups to start and to converge.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use combkv::durable::FaultyStorage;
use combkv::op::{Cond, Op};
use combkv::{Expiry, Flags};
use combkv_replica::network::sim::SimNet;
use combkv_replica::{
    ApplyHook, GroupId, Host, LogOptions, Replica, ReplicaConfig, SyncPolicy, codec,
};
use parking_lot::Mutex;

pub const NODES: u64 = 3;
/// The faults the five-node tests run under: a request or reply in fifty
/// dropped, each delayed up to 8 ms.
pub const FAULTY: combkv_replica::network::sim::Faults = combkv_replica::network::sim::Faults {
    drop_request: 0.02,
    drop_reply: 0.02,
    delay_ms: (0, 8),
};
/// Group 0 is the one a one-keyspace cluster has; 7 any other.
pub const GROUPS: [GroupId; 2] = [0, 7];
pub fn config(dir: &Path, id: u64, group: GroupId, storage: &FaultyStorage) -> ReplicaConfig {
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

pub struct Cluster {
    pub dir: std::path::PathBuf,
    pub net: SimNet,
    /// Each node's host, and each group's replica on it.
    pub nodes: Mutex<HashMap<u64, Host>>,
    /// Each (node, group)'s log's file system, kept across restarts.
    pub storage: HashMap<(u64, GroupId), FaultyStorage>,
    /// Told of every entry each group applies (none unless a test asks,
    /// [`Cluster::hooked`]): the groups splits make take group 0's config,
    /// so setting it where group 0 starts reaches every range.
    pub on_apply: Option<ApplyHook>,
}

impl Cluster {
    pub fn host(&self, id: u64) -> Option<Host> {
        self.nodes.lock().get(&id).cloned()
    }

    pub fn replica(&self, id: u64, group: GroupId) -> Option<Replica> {
        self.nodes.lock().get(&id).and_then(|h| h.group(group))
    }

    pub async fn start(&self, id: u64, groups: &[GroupId]) {
        for g in GROUPS {
            let storage = &self.storage[&(id, g)];
            if storage.has_crashed() {
                storage.restart();
            }
        }
        let host = Host::simulated(id, &self.net);
        for &g in groups {
            let mut c = config(&self.dir, id, g, &self.storage[&(id, g)]);
            c.on_apply = self.on_apply.clone();
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

    pub async fn start_group(&self, id: u64, g: GroupId) {
        let host = self.nodes.lock().get(&id).cloned().unwrap();
        let c = config(&self.dir, id, g, &self.storage[&(id, g)]);
        host.start_group(g, &c).await.unwrap();
    }

    /// Crashes node `id`: what its logs (every group's) had not synced is
    /// lost, and it stops at once.
    pub async fn crash(&self, id: u64) {
        for g in GROUPS {
            self.storage[&(id, g)].crash();
        }
        self.stop(id).await;
    }

    pub async fn stop(&self, id: u64) {
        let host = self.nodes.lock().remove(&id);
        self.net.set_down(id, true);
        if let Some(host) = host {
            for g in host.groups() {
                host.remove_group(g).unwrap().shutdown().await;
            }
        }
    }
}

/// Waits until every replica of `group` has applied its leader's last
/// entry; returns their digests, which must be equal.
pub async fn converge(cl: &Cluster, group: GroupId) -> Result<(), String> {
    converge_on(cl, group, &(1..=NODES).collect::<Vec<_>>()).await
}

/// [`converge`] over the replicas on `on`.
pub async fn converge_on(cl: &Cluster, group: GroupId, on: &[u64]) -> Result<(), String> {
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

pub fn put_op(k: &[u8], v: &[u8]) -> Vec<u8> {
    let mut ops = Vec::new();
    codec::encode_ops(&[put(k, v)], &mut ops);
    ops
}

pub fn kv(n: usize) -> Vec<u8> {
    format!("k{n:02}").into_bytes()
}

pub async fn wait_group(cl: &Cluster, id: u64, g: GroupId) -> Replica {
    for _ in 0..600 {
        if let Some(r) = cl.replica(id, g) {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("node {id} never started group {g}");
}

/// The placement step the meta group's leader would take next for three
/// replicas a range over nodes `1..=nodes` (none: settled).
pub fn placement_step(
    map: &combkv_replica::ranges::RangeMap,
    nodes: u64,
) -> Option<(u64, Vec<u64>)> {
    let all: Vec<u64> = (1..=nodes).collect();
    combkv_replica::ranges::next_placement(map, &all, 3)
}

/// Runs `body` on a single-threaded runtime whose clock is paused (time
/// passes only while every task waits, so a run takes simulated time),
/// handing it a fresh directory named after `name`, removed afterwards.
pub fn simulate<F, Fut, T>(name: &str, body: F) -> T
where
    F: FnOnce(std::path::PathBuf) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("combkv-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = rt.block_on(body(dir.clone()));
    let _ = std::fs::remove_dir_all(&dir);
    out
}

impl Cluster {
    /// Nodes `1..=nodes` on `net`, none started, each group's log on a
    /// simulated file system drawn from `seed`.
    pub fn new(dir: std::path::PathBuf, net: SimNet, nodes: u64, seed: u64) -> Arc<Cluster> {
        Self::hooked(dir, net, nodes, seed, None)
    }

    /// Starts nodes `1..=nodes`, group 0 on each, and forms the cluster of
    /// them on node 1.
    pub async fn start_all(&self, nodes: u64) {
        for id in 1..=nodes {
            self.start(id, &[0]).await;
        }
        self.form(&(1..=nodes).collect::<Vec<_>>()).await;
    }

    /// [`Cluster::start_all`] with group 0's config on every node changed
    /// by `tweak` (the settings a test is about; the groups split off
    /// take theirs from it).
    pub async fn start_all_with(&self, nodes: u64, tweak: impl Fn(&mut ReplicaConfig)) {
        for id in 1..=nodes {
            let host = Host::simulated(id, &self.net);
            let mut c = config(&self.dir, id, 0, &self.storage[&(id, 0)]);
            tweak(&mut c);
            host.start_group(0, &c).await.unwrap();
            self.nodes.lock().insert(id, host);
        }
        self.form(&(1..=nodes).collect::<Vec<_>>()).await;
    }

    /// The leaderships handed over on every node so far.
    pub fn leaders_moved(&self) -> u64 {
        let nodes = self.nodes.lock();
        nodes.values().map(|h| h.range_stats().leaders_moved).sum()
    }

    /// [`Cluster::new`], every group of every node started with `on_apply`.
    pub fn hooked(
        dir: std::path::PathBuf,
        net: SimNet,
        nodes: u64,
        seed: u64,
        on_apply: Option<ApplyHook>,
    ) -> Arc<Cluster> {
        Arc::new(Cluster {
            on_apply,
            dir,
            net,
            nodes: Mutex::new(HashMap::new()),
            storage: (1..=nodes)
                .flat_map(|id| GROUPS.map(|g| ((id, g), FaultyStorage::new(seed ^ id ^ (g << 8)))))
                .collect(),
        })
    }

    /// Forms group 0 of the cluster from `nodes` (started), on the first.
    pub async fn form(&self, nodes: &[u64]) {
        let members: Vec<(u64, String)> = nodes
            .iter()
            .map(|&id| (id, format!("127.0.0.{id}:7000")))
            .collect();
        self.replica(nodes[0], 0)
            .unwrap()
            .initialize(&members)
            .await
            .unwrap();
    }
}

/// The seeds a seeded test runs: `COMBKV_SIM_SEED=S` the one seed S, else
/// `COMBKV_SIM_SCHEDULES=N` of them (`default` unless told).
pub fn seeds(default: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var("COMBKV_SIM_SEED") {
        return vec![s.parse().expect("COMBKV_SIM_SEED is a number")];
    }
    let n: u64 = std::env::var("COMBKV_SIM_SCHEDULES")
        .ok()
        .map_or(default, |s| {
            s.parse().expect("COMBKV_SIM_SCHEDULES is a number")
        });
    (0..n).collect()
}

/// The replica of `group` on `nodes` that leads it, once one does.
/// Adds node `id` (at its simulated address) through `leader`, which must
/// lead group 0; it must catch up within 30 s.
pub async fn add(leader: &Replica, id: u64) {
    leader
        .add_node(
            id,
            &format!("127.0.0.{id}:7000"),
            Duration::from_secs(30),
            std::future::pending(),
        )
        .await
        .unwrap();
}

pub async fn wait_leader(cl: &Cluster, group: GroupId, nodes: &[u64]) -> Replica {
    loop {
        if let Some(l) = nodes
            .iter()
            .find_map(|&id| cl.replica(id, group).filter(|r| r.is_leader()))
        {
            return l;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A client's key, its last acknowledged value and the last value it sent
/// (values are increasing counts; 0: none).
pub type Outcome = (Vec<u8>, usize, usize);

/// Checks each client's key on every replica of each group in `groups`
/// (`holders` gives the nodes that hold one): absent from every group
/// but the one `owner` names, and there at the last acknowledged value or
/// a later one sent (whose answer was lost), never an older one.
pub fn check_owned(
    cl: &Cluster,
    outcomes: &[Outcome],
    groups: &[GroupId],
    holders: impl Fn(GroupId) -> Vec<u64>,
    owner: impl Fn(&[u8]) -> GroupId,
) -> Result<(), String> {
    for (key, acked, sent) in outcomes {
        for &g in groups {
            for id in holders(g) {
                let got = cl.replica(id, g).unwrap().current_store().get(key).unwrap();
                if g != owner(key) {
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
    Ok(())
}

/// Reports a seeded run: panics with how to rerun it, or says what it did.
pub fn report(seed: u64, result: Result<usize, String>) {
    match result {
        Err(e) => panic!("seed {seed} failed (rerun: COMBKV_SIM_SEED={seed}): {e}"),
        Ok(n) => eprintln!("seed {seed}: acknowledged values summed {n}"),
    }
}

/// What the five-node fault tests do to the cluster while their clients
/// run: with node 5 cut off, range 0 splits at `splits[0]` and the new
/// range 1 at `splits[1]` (asked through random nodes of the majority);
/// the network heals; range 1 is told to move to nodes 2, 4 and 5; then
/// every node crashes at once and starts again.
pub async fn split_move_crash(
    cl: &Cluster,
    rng: &mut rand::rngs::StdRng,
    splits: [&[u8]; 2],
) -> Result<(), String> {
    use rand::Rng as _;
    const FIVE: u64 = 5;
    let host = |id: u64| cl.nodes.lock().get(&id).cloned();
    tokio::time::sleep(Duration::from_millis(rng.random_range(100..400))).await;
    cl.net.partition(&[&[1, 2, 3, 4], &[5]]);
    for (range, at) in [(0, splits[0]), (1, splits[1])] {
        let mut done = false;
        for _ in 0..100 {
            let via = rng.random_range(1..=4);
            if let Some(h) = host(via)
                // Snapshots may pin the range: split all the same, so that
                // their reads meet a range with none of their past.
                && h.split_when(range, at, combkv_replica::Pinned::Force).await.is_ok()
            {
                done = true;
                break;
            }
            // An answer lost on the way may hide a split that applied.
            if cl
                .replica(via, 0)
                .and_then(|r| r.range_map())
                .is_some_and(|m| m.route(at).start == at)
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
    tokio::time::sleep(Duration::from_millis(rng.random_range(200..800))).await;
    for id in 1..=FIVE {
        cl.crash(id).await;
    }
    tokio::time::sleep(Duration::from_millis(rng.random_range(0..300))).await;
    for id in 1..=FIVE {
        cl.start(id, &[0]).await;
    }
    Ok(())
}

/// After [`split_move_crash`] and the clients: faults off, range 1 on
/// nodes 2, 4 and 5 alone, each of ranges 0 to 2 converged on its
/// holders, and `outcomes` checked against the map (`check_owned`).
pub async fn settle_after_move(cl: &Cluster, outcomes: &[Outcome]) -> Result<(), String> {
    let map = converge_after_move(cl).await?;
    check_owned(cl, outcomes, &[0, 1, 2], holders_after_move, |key| {
        map.route(key).id
    })?;
    for id in 1..=5 {
        cl.stop(id).await;
    }
    Ok(())
}

/// The nodes that hold range `g` once [`split_move_crash`] has settled.
pub fn holders_after_move(g: GroupId) -> Vec<u64> {
    if g == 1 {
        vec![2, 4, 5]
    } else {
        (1..=5).collect()
    }
}

/// The first part of [`settle_after_move`], for tests that check the
/// stores their own way: faults off, range 1 on nodes 2, 4 and 5 alone,
/// each of ranges 0 to 2 converged on its holders; the range map then.
pub async fn converge_after_move(cl: &Cluster) -> Result<combkv_replica::ranges::RangeMap, String> {
    let all: Vec<u64> = (1..=5).collect();
    cl.net
        .set_faults(combkv_replica::network::sim::Faults::NONE);
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
    for g in [0, 1, 2] {
        for id in holders_after_move(g) {
            wait_group(cl, id, g).await;
        }
        converge_on(cl, g, &holders_after_move(g)).await?;
    }
    Ok(cl.replica(1, 0).unwrap().range_map().unwrap())
}

/// A plain SET of `key` to `value`.
pub fn put<'a>(key: &'a [u8], value: &'a [u8]) -> Op<'a> {
    Op::Put {
        key,
        value,
        expiry: Expiry::Never,
        flags: Flags::Set(0),
        cond: Cond::Any,
        return_old: false,
    }
}
