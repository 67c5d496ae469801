//! A cluster whose keyspace is split into ranges, each its own Raft group,
//! with real processes on loopback addresses (node N at 127.0.0.N) and
//! clients through the `redis` crate (`docs/cluster.md`, "Ranges"):
//!
//! - `a_keyspace_split_into_ranges_is_served_whole_by_every_node`: three
//!   ranges split by `CLUSTER SPLIT`, every kind of read and write through
//!   every node, writes across ranges refused, a restart of every node.
//! - `ranges_split_on_their_own_as_the_data_grows`: splits by size.
//! - `ranges_placed_on_three_of_five_nodes_are_read_through_every_node`:
//!   placement on three of five nodes, a sixth node added, one removed.
//! - `acknowledged_writes_survive_splits_and_a_killed_node`: writers while
//!   ranges split and a node is killed with SIGKILL.
//! - `five_nodes_split_into_sixteen_ranges_under_kills_and_a_partition`:
//!   the whole life of a ranged cluster with writers running throughout
//!   (growth into 16 or more ranges placed on three of five nodes, kill -9
//!   of random nodes one at a time and a partition while splits and moves
//!   run, a sixth node added, a node removed); every acknowledged write is
//!   there afterwards with its value, through every node.
//!   `COMBKV_RANGES_SEED` replays a run (its seed is printed).

mod support;

use support::node::{Node, admin, field, find_leader, peers, ranges, wait_serving};
use support::proxy::{Cut, Proxy};

use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Ranges that split by size at 64 KB and are placed on three nodes each.
const PLACED: [&str; 4] = [
    "--cluster-range-split-bytes",
    "64kb",
    "--cluster-range-replicas",
    "3",
];

/// `combkv cluster remove gone`, through the leader of `nodes`.
fn remove(nodes: &[Node], gone: u64) {
    let (ok, said) = admin(
        find_leader(nodes),
        &["remove", &gone.to_string()],
        Duration::from_secs(60),
    );
    assert!(ok, "{said}");
}

/// Starts every node of `nodes` with `peers` and `args`, and waits for a
/// leader and for every node to serve.
fn start_all(nodes: &mut [Node], peers: &str, args: &[&str]) {
    for n in nodes.iter_mut() {
        n.start_with(peers, args);
    }
    find_leader(nodes);
    wait_serving(nodes);
}

fn root(name: &str) -> std::path::PathBuf {
    support::node::root("ranges", name)
}

/// A keyspace split into three ranges on three processes: every key is
/// written and read through any node, batched reads (MGET, pipelined GETs
/// and RANGEs) and scans (RANGE with and without LIMIT, REV, SCAN, KEYS,
/// DBSIZE, FLOOR, CEIL) answer across the ranges as one store would, a
/// write whose keys lie in two ranges is refused as Redis Cluster's
/// `CROSSSLOT` and changes nothing, a restart of every node keeps the
/// ranges and every key, and merges of the ranges back into one keep
/// every key too.
#[test]
fn a_keyspace_split_into_ranges_is_served_whole_by_every_node() {
    let root = root("split");
    let mut nodes: Vec<Node> = (1..=3).map(|id| Node::new(&root, id)).collect();
    let list = peers(&nodes.iter().collect::<Vec<_>>());
    start_all(&mut nodes, &list, &[]);
    let key = |i: usize| format!("k{i:03}");
    let mut cons: Vec<redis::Connection> = nodes.iter().map(Node::connect).collect();
    for i in 0..200 {
        let _: () = redis::cmd("SET")
            .arg(key(i))
            .arg(format!("a{i}"))
            .query(&mut cons[i % 3])
            .unwrap();
    }
    // Two splits, asked of two nodes: range 0 at k100, then the new range
    // 1 at k150 (recorded in the map, then carried out by its leader).
    let (ok, said) = admin(&nodes[1], &["split", "k100"], Duration::from_secs(30));
    assert!(ok && said.trim() == "1", "{said}");
    let (ok, said) = admin(&nodes[2], &["split", "k150"], Duration::from_secs(30));
    assert!(ok && said.trim() == "2", "{said}");
    let (ok, said) = admin(&nodes[0], &["split", "k150"], Duration::from_secs(30));
    assert!(!ok && said.contains("starts at this key already"), "{said}");
    let settled = |n: &Node| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = n.info_ranges();
            if field(&r, "ranges") == "3" && field(&r, "ranges_hosted") == "3" {
                return r;
            }
            assert!(Instant::now() < deadline, "node {}: {r:?}", n.id);
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    for n in &nodes {
        let r = settled(n);
        assert_eq!(field(&r, "ranges_splits_applied"), "2", "{r:?}");
        assert_eq!(field(&r, "ranges_keys"), "200", "{r:?}");
    }
    let said = ranges(&nodes[0]);
    assert!(said.starts_with("ranges:3\n"), "{said}");
    // Splits by load are off: no range's load is counted.
    let lines: Vec<&str> = said.lines().skip(1).collect();
    assert!(lines.iter().all(|l| l.ends_with(" load -")), "{said}");
    for (id, lo, hi) in [
        (0, "\"\"", "\"k100\""),
        (1, "\"k100\"", "\"k150\""),
        (2, "\"k150\"", "end"),
    ] {
        assert!(said.contains(&format!("range {id} [{lo}, {hi})")), "{said}");
    }
    // Writes through every node land in their ranges; reads through every
    // node see them.
    for i in 0..200 {
        let _: () = redis::cmd("SET")
            .arg(key(i))
            .arg(format!("b{i}"))
            .query(&mut cons[(i + 1) % 3])
            .unwrap();
    }
    // A read inside one range waits for that range's read index alone,
    // not for one on every range its node holds (three here).
    for (n, con) in cons.iter_mut().enumerate() {
        let indexes = || -> u64 {
            field(&nodes[n].info_ranges(), "ranges_read_indexes")
                .parse()
                .unwrap()
        };
        let before = indexes();
        for i in 100..150 {
            let v: String = redis::cmd("GET").arg(key(i)).query(con).unwrap();
            assert_eq!(v, format!("b{i}"), "node {} key {i}", n + 1);
        }
        // A command read by itself, its keys named by its table entry.
        for i in 100..125 {
            let there: i64 = redis::cmd("EXISTS").arg(key(i)).query(con).unwrap();
            assert_eq!(there, 1, "node {} key {i}", n + 1);
        }
        let taken = indexes() - before;
        assert!(
            (75..110).contains(&taken),
            "node {}: 50 GETs and 25 EXISTS inside range 1 took {taken} read indexes",
            n + 1
        );
        // GETEX without options reads, though it is a write: after a read
        // index on its key's range, as GET.
        let before = indexes();
        let v: String = redis::cmd("GETEX").arg(key(120)).query(con).unwrap();
        assert_eq!(v, "b120", "node {}", n + 1);
        let taken = indexes() - before;
        assert!(
            (1..3).contains(&taken),
            "node {}: GETEX took {taken} read indexes",
            n + 1
        );
        // And after the connection's own write before it in one pipeline.
        let (_, v): ((), String) = redis::pipe()
            .cmd("SET")
            .arg(key(122))
            .arg("c122")
            .cmd("GETEX")
            .arg(key(122))
            .query(con)
            .unwrap();
        assert_eq!(v, "c122", "node {}: GETEX after its own SET", n + 1);
        let _: () = redis::cmd("SET")
            .arg(key(122))
            .arg("b122")
            .query(con)
            .unwrap();
        // Inside a transaction it reads through the transaction's entry.
        let (v,): (String,) = redis::pipe()
            .atomic()
            .cmd("GETEX")
            .arg(key(121))
            .query(con)
            .unwrap();
        assert_eq!(v, "b121", "node {}", n + 1);
    }
    for (n, con) in cons.iter_mut().enumerate() {
        for i in (0..200).step_by(7) {
            let v: String = redis::cmd("GET").arg(key(i)).query(con).unwrap();
            assert_eq!(v, format!("b{i}"), "node {} key {i}", n + 1);
        }
        // One batch across the three ranges, pipelined GETs too.
        let keys: Vec<String> = [5, 120, 199, 99, 100, 149, 150].map(key).to_vec();
        let got: Vec<String> = redis::cmd("MGET").arg(&keys).query(con).unwrap();
        let want: Vec<String> = [5, 120, 199, 99, 100, 149, 150]
            .map(|i| format!("b{i}"))
            .to_vec();
        assert_eq!(got, want, "node {}", n + 1);
        let mut pipe = redis::pipe();
        for k in &keys {
            pipe.cmd("GET").arg(k);
        }
        pipe.cmd("RANGE").arg("[k098").arg("[k152");
        pipe.cmd("RANGE")
            .arg("[k090")
            .arg("+")
            .arg("LIMIT")
            .arg("70");
        let (g0, g1, g2, g3, g4, g5, g6, r1, r2): (
            String,
            String,
            String,
            String,
            String,
            String,
            String,
            Vec<String>,
            Vec<String>,
        ) = pipe.query(con).unwrap();
        assert_eq!(vec![g0, g1, g2, g3, g4, g5, g6], want, "node {}", n + 1);
        let pairs = |from: usize, to: usize| -> Vec<String> {
            (from..to).flat_map(|i| [key(i), format!("b{i}")]).collect()
        };
        assert_eq!(r1, pairs(98, 153), "node {}", n + 1);
        assert_eq!(r2, pairs(90, 160), "node {}", n + 1);
        // Scans across every range, one at a time too.
        let all: Vec<String> = redis::cmd("RANGE")
            .arg("-")
            .arg("+")
            .arg("KEYSONLY")
            .query(con)
            .unwrap();
        assert_eq!(all, (0..200).map(key).collect::<Vec<_>>(), "node {}", n + 1);
        let rev: Vec<String> = redis::cmd("RANGE")
            .arg("(k095")
            .arg("[k160")
            .arg("KEYSONLY")
            .arg("REV")
            .arg("LIMIT")
            .arg("20")
            .query(con)
            .unwrap();
        assert_eq!(
            rev,
            (141..=160).rev().map(key).collect::<Vec<_>>(),
            "node {}",
            n + 1
        );
        let n_keys: i64 = redis::cmd("DBSIZE").query(con).unwrap();
        assert_eq!(n_keys, 200);
        let info: String = redis::cmd("INFO").arg("keyspace").query(con).unwrap();
        assert!(info.contains("db0:keys=200,"), "{info}");
        let mut listed: Vec<String> = redis::cmd("KEYS").arg("k1*").query(con).unwrap();
        listed.sort();
        assert_eq!(listed, (100..200).map(key).collect::<Vec<_>>());
        let mut scanned = Vec::new();
        let mut cursor = "0".to_string();
        loop {
            let (next, page): (String, Vec<String>) = redis::cmd("SCAN")
                .arg(&cursor)
                .arg("COUNT")
                .arg(30)
                .query(con)
                .unwrap();
            scanned.extend(page);
            if next == "0" {
                break;
            }
            cursor = next;
        }
        scanned.sort();
        assert_eq!(
            scanned,
            (0..200).map(key).collect::<Vec<_>>(),
            "node {}",
            n + 1
        );
        let floor: Vec<String> = redis::cmd("FLOOR").arg("k100").query(con).unwrap();
        assert_eq!(floor, [key(100), "b100".into()]);
        let floor: Vec<String> = redis::cmd("FLOOR").arg("k0999").query(con).unwrap();
        assert_eq!(floor, [key(99), "b99".into()]);
        let ceil: Vec<String> = redis::cmd("CEIL").arg("k1495").query(con).unwrap();
        assert_eq!(ceil, [key(150), "b150".into()]);
        // A floor start whose floor lies in the range before its own
        // (k150 gone for a moment: range 2 starts there).
        let _: i64 = redis::cmd("DEL").arg(key(150)).query(con).unwrap();
        let from_floor: Vec<String> = redis::cmd("RANGE")
            .arg("[k150")
            .arg("[k152")
            .arg("FLOOR")
            .query(con)
            .unwrap();
        let want: Vec<String> = [149, 151, 152]
            .iter()
            .flat_map(|&i| [key(i), format!("b{i}")])
            .collect();
        assert_eq!(from_floor, want, "node {}", n + 1);
        let _: () = redis::cmd("SET")
            .arg(key(150))
            .arg("b150")
            .query(con)
            .unwrap();
    }
    // A write of two ranges' keys, and a snapshot of them all: refused,
    // nothing changed.
    let e = redis::cmd("MSET")
        .arg(key(1))
        .arg("x")
        .arg(key(199))
        .arg("y")
        .query::<()>(&mut cons[0])
        .unwrap_err();
    assert_eq!(e.code(), Some("CROSSSLOT"), "{e}");
    // A snapshot is of every range at once, and listed as the node's.
    let snap: i64 = redis::cmd("SNAPSHOT")
        .arg("CREATE")
        .query(&mut cons[1])
        .unwrap();
    let listed: Vec<(i64, u64, i64)> = redis::cmd("SNAPSHOT")
        .arg("LIST")
        .query(&mut cons[1])
        .unwrap();
    assert_eq!(listed.iter().map(|s| s.0).collect::<Vec<_>>(), [snap]);
    let at: Vec<String> = redis::cmd("RANGEAT")
        .arg(snap)
        .arg("-")
        .arg("+")
        .arg("KEYSONLY")
        .query(&mut cons[1])
        .unwrap();
    assert_eq!(at.len(), 200);
    let other: redis::RedisResult<Option<String>> = redis::cmd("GETAT")
        .arg(snap)
        .arg(key(1))
        .query(&mut cons[2]);
    assert!(other.is_err(), "another node's snapshot: {other:?}");
    // Released (its ranges drop their pins in the background): the
    // merges below would be refused while it pins them.
    let released: i64 = redis::cmd("SNAPSHOT")
        .arg("RELEASE")
        .arg(snap)
        .query(&mut cons[1])
        .unwrap();
    assert_eq!(released, 1);
    // A backup would be one range's store: refused, saying why.
    let e = redis::cmd("BACKUP")
        .arg(root.join("backup").to_str().unwrap())
        .query::<()>(&mut cons[0])
        .unwrap_err();
    assert!(e.to_string().contains("split into ranges"), "{e}");
    // One range's keys in one write: taken.
    let _: () = redis::cmd("MSET")
        .arg(key(101))
        .arg("c")
        .arg(key(102))
        .arg("c")
        .query(&mut cons[2])
        .unwrap();
    let got: Vec<String> = redis::cmd("MGET")
        .arg(key(1))
        .arg(key(199))
        .arg(key(101))
        .query(&mut cons[0])
        .unwrap();
    assert_eq!(got, ["b1", "b199", "c"]);
    // Every node restarted: three ranges, every key.
    drop(cons);
    for n in &mut nodes {
        n.kill();
    }
    start_all(&mut nodes, &list, &[]);
    for n in &nodes {
        settled(n);
        let mut con = n.connect();
        let all: Vec<String> = redis::cmd("RANGE")
            .arg("-")
            .arg("+")
            .query(&mut con)
            .unwrap();
        assert_eq!(all.len(), 400, "node {}", n.id);
        let v: String = redis::cmd("GET").arg(key(160)).query(&mut con).unwrap();
        assert_eq!(v, "b160");
    }
    // Merges, asked of two nodes: range 1 with range 2, then range 0 with
    // range 1 (the first range takes the whole keyspace back). Each time
    // every key stays, read through every node, and writes go on.
    let merged_into = |n: &Node, count: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = n.info_ranges();
            if field(&r, "ranges") == count
                && field(&r, "ranges_hosted") == count
                && field(&r, "ranges_stale_replicas") == "0"
                && field(&r, "ranges_keys") == "200"
            {
                return;
            }
            assert!(Instant::now() < deadline, "node {}: {r:?}", n.id);
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let check_all = |round: &str| {
        for n in &nodes {
            let mut con = n.connect();
            let all: Vec<String> = redis::cmd("RANGE")
                .arg("-")
                .arg("+")
                .arg("KEYSONLY")
                .query(&mut con)
                .unwrap();
            assert_eq!(all, (0..200).map(key).collect::<Vec<_>>(), "node {}", n.id);
            let n_keys: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
            assert_eq!(n_keys, 200, "node {}", n.id);
            let _: () = redis::cmd("SET")
                .arg(key(120 + n.id as usize))
                .arg(round)
                .query(&mut con)
                .unwrap();
            let got: Vec<String> = redis::cmd("MGET")
                .arg(key(1))
                .arg(key(120 + n.id as usize))
                .arg(key(160))
                .query(&mut con)
                .unwrap();
            assert_eq!(got, ["b1", round, "b160"], "node {}", n.id);
        }
    };
    let (ok, said) = admin(&nodes[1], &["merge", "k120"], Duration::from_secs(30));
    assert!(ok && said.trim() == "2", "{said}");
    for n in &nodes {
        merged_into(n, "2");
    }
    let said = ranges(&nodes[2]);
    assert!(said.contains("range 1 [\"k100\", end)"), "{said}");
    check_all("m1");
    let (ok, said) = admin(&nodes[2], &["merge", "k000"], Duration::from_secs(30));
    assert!(ok && said.trim() == "1", "{said}");
    for n in &nodes {
        merged_into(n, "1");
    }
    check_all("m2");
    let (ok, said) = admin(&nodes[0], &["merge", "k100"], Duration::from_secs(30));
    assert!(!ok && said.contains("ends the keyspace"), "{said}");
    let merges: u64 = nodes
        .iter()
        .map(|n| {
            field(&n.info_ranges(), "ranges_merges")
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert_eq!(
        merges, 2,
        "each merge carried out once, by its range's leader"
    );
    drop(nodes);
    let _ = std::fs::remove_dir_all(&root);
}

/// Ranges split on their own as the data grows past
/// `--cluster-range-split-bytes`, each at the key that halves its bytes,
/// while writers go on through every node: every key stays readable
/// through every node, and the ranges cover the keys in balanced parts.
/// Reads across ranges are one snapshot of them all: a writer sets `a`
/// then `z` (two ranges) to 1, 2, 3, ..., each write acknowledged before
/// the next is sent, through changing nodes, while readers on every node
/// read both with MGET and with RANGE. A read that saw `z` at n and `a`
/// below n would have seen a write without one acknowledged before it
/// (what reading each range at its own read index allows: `a` read, then
/// both written, then `z` read; 20,000 keys between them make RANGE take
/// a while to get from one to the other). Snapshots taken meanwhile show
/// one such moment, the same each time they are read.
#[test]
fn reads_across_ranges_never_see_a_later_write_without_an_earlier_one() {
    let root = root("across");
    let mut nodes: Vec<Node> = (1..=3).map(|id| Node::new(&root, id)).collect();
    let list = peers(&nodes.iter().collect::<Vec<_>>());
    // Loads counted (a split load no range comes near), for `ranges`.
    start_all(
        &mut nodes,
        &list,
        &["--cluster-range-split-load", "1000000"],
    );
    let (ok, said) = admin(&nodes[0], &["split", "m"], Duration::from_secs(30));
    assert!(ok && said.trim() == "1", "{said}");
    for n in &nodes {
        let deadline = Instant::now() + Duration::from_secs(60);
        while field(&n.info_ranges(), "ranges_hosted") != "2" {
            assert!(Instant::now() < deadline, "node {}", n.id);
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // Keys between `a` and `z` (in `a`'s range), so that a RANGE over
    // both takes a while between reading the one and the other.
    let mut con = nodes[0].connect();
    for chunk in 0..20 {
        let mut mset = redis::cmd("MSET");
        for i in chunk * 1000..(chunk + 1) * 1000 {
            mset.arg(format!("f{i:05}")).arg("-");
        }
        let _: () = mset.query(&mut con).unwrap();
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let mut cons: Vec<redis::Connection> = nodes.iter().map(Node::connect).collect();
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || n < 100 {
                n += 1;
                let i = n as usize;
                let _: () = redis::cmd("SET")
                    .arg("a")
                    .arg(n)
                    .query(&mut cons[i % 3])
                    .unwrap();
                let _: () = redis::cmd("SET")
                    .arg("z")
                    .arg(n)
                    .query(&mut cons[(i + 1) % 3])
                    .unwrap();
            }
            n
        })
    };
    let readers: Vec<_> = (0..3)
        .map(|r| {
            let mut con = nodes[r].connect();
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let (mut reads, mut moving, mut snaps) = (0u64, 0u64, 0u64);
                let check = |a: u64, z: u64, how: &str| {
                    assert!(
                        z <= a && a <= z + 1,
                        "node {}: {how} saw a={a} z={z}",
                        r + 1
                    );
                };
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let got: Vec<Option<u64>> = redis::cmd("MGET")
                        .arg("a")
                        .arg("z")
                        .query(&mut con)
                        .unwrap();
                    let (a, z) = (got[0].unwrap_or(0), got[1].unwrap_or(0));
                    check(a, z, "MGET");
                    let all: Vec<String> = redis::cmd("RANGE")
                        .arg("-")
                        .arg("+")
                        .query(&mut con)
                        .unwrap();
                    let value = |k: &str| {
                        all.chunks(2)
                            .find(|p| p[0] == k)
                            .map_or(0, |p| p[1].parse::<u64>().unwrap())
                    };
                    let (a2, z2) = (value("a"), value("z"));
                    check(a2, z2, "RANGE");
                    reads += 2;
                    if reads % 40 == 0 {
                        // A snapshot of both ranges: one moment, and the
                        // same one each time it is read.
                        let snap: i64 = redis::cmd("SNAPSHOT")
                            .arg("CREATE")
                            .query(&mut con)
                            .unwrap();
                        let read = |con: &mut redis::Connection| -> (u64, u64) {
                            let got: Vec<Option<u64>> = ["a", "z"]
                                .iter()
                                .map(|k| redis::cmd("GETAT").arg(snap).arg(k).query(con).unwrap())
                                .collect();
                            (got[0].unwrap_or(0), got[1].unwrap_or(0))
                        };
                        let (a3, z3) = read(&mut con);
                        check(a3, z3, "GETAT");
                        // The first one outlives the second of past the
                        // ranges hold on their own: its pins keep it.
                        let wait = if snaps == 0 { 1_500 } else { 20 };
                        std::thread::sleep(Duration::from_millis(wait));
                        assert_eq!(
                            read(&mut con),
                            (a3, z3),
                            "node {}: the snapshot moved",
                            r + 1
                        );
                        let at: Vec<String> = redis::cmd("RANGEAT")
                            .arg(snap)
                            .arg("[a")
                            .arg("[z")
                            .query(&mut con)
                            .unwrap();
                        let a4 = at
                            .chunks(2)
                            .find(|p| p[0] == "a")
                            .map_or(0, |p| p[1].parse().unwrap());
                        let z4 = at
                            .chunks(2)
                            .find(|p| p[0] == "z")
                            .map_or(0, |p| p[1].parse().unwrap());
                        assert_eq!((a4, z4), (a3, z3), "node {}: RANGEAT", r + 1);
                        snaps += 1;
                    }
                    moving += u64::from(a2 > a);
                }
                (reads, moving, snaps)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(4));
    // Both ranges take writes: each line says its requests a second.
    let said = ranges(&nodes[0]);
    let loads: Vec<u64> = said
        .lines()
        .filter_map(|l| l.split(" load ").nth(1)?.parse().ok())
        .collect();
    assert!(loads.len() == 2 && loads.iter().all(|&l| l > 0), "{said}");
    std::thread::sleep(Duration::from_secs(4));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = writer.join().unwrap();
    let mut total = 0;
    for r in readers {
        let (reads, moving, snaps) = r.join().unwrap();
        total += reads;
        assert!(snaps > 0, "no snapshot taken");
        eprintln!(
            "{reads} reads across ranges, {moving} while the writer went on, {snaps} snapshots"
        );
    }
    eprintln!("{rounds} rounds written");
    assert!(total > 50, "too few reads to tell: {total}");
    let sizes: Vec<i64> = nodes
        .iter()
        .map(|n| redis::cmd("DBSIZE").query(&mut n.connect()).unwrap())
        .collect();
    assert_eq!(sizes, [20_002, 20_002, 20_002]);
    for n in &nodes {
        let r = n.info_ranges();
        let served: u64 = field(&r, "ranges_reads_across").parse().unwrap();
        assert!(served > 0, "node {}: {r:?}", n.id);
        // Every node holds both ranges: the snapshots pinned each here.
        let pins: u64 = field(&r, "ranges_snapshot_pins").parse().unwrap();
        assert!(pins >= 2, "node {}: {r:?}", n.id);
    }
}

/// Reads through every node while the keyspace splits under them, one
/// split after another: a read that meets a range map behind the groups
/// here (a split a group applied before the map reached this node), or a
/// range whose group has not started here yet, waits for the map or the
/// group (parked, on nodes with one event loop) and answers as one store
/// would: GET, EXISTS, MGET, DBSIZE, RANGE with LIMIT and FLOOR, each
/// checked against what was written.
#[test]
fn reads_meeting_splits_answer_as_one_store() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    const KEYS: usize = 3000;
    const SPLITS: usize = 24;
    let root = root("readsplits");
    let mut nodes: Vec<Node> = (1..=3).map(|id| Node::new(&root, id)).collect();
    let list = peers(&nodes.iter().collect::<Vec<_>>());
    start_all(&mut nodes, &list, &["--threads", "1"]);
    let key = |i: usize| format!("k{i:05}");
    let mut con = nodes[0].connect();
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(500) {
        let mut mset = redis::cmd("MSET");
        for &i in chunk {
            mset.arg(key(i)).arg(format!("v{i}"));
        }
        let _: () = mset.query(&mut con).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|r| {
            let mut con = nodes[r].connect();
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let (mut rounds, mut unavailable) = (0u64, 0u64);
                let mut seed = 0x9e37_79b9_u64 + r as u64;
                let mut pick = || {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    (seed % KEYS as u64) as usize
                };
                // Past the splits until enough answered to tell (a loaded
                // machine may fit few rounds in the splits themselves).
                while !stop.load(Ordering::Relaxed) || (rounds < 20 && unavailable < 1000) {
                    let (i, j) = (pick(), pick());
                    let (get, exists, mget, dbsize, range, floor): (
                        String,
                        i64,
                        Vec<String>,
                        i64,
                        Vec<String>,
                        Vec<String>,
                    ) = redis::pipe()
                        .cmd("GET")
                        .arg(key(i))
                        .cmd("EXISTS")
                        .arg(key(i))
                        .arg(key(j))
                        .arg("nokey")
                        .cmd("MGET")
                        .arg(key(i))
                        .arg(key(j))
                        .cmd("DBSIZE")
                        .cmd("RANGE")
                        .arg(format!("[{}", key(i)))
                        .arg("+")
                        .arg("LIMIT")
                        .arg(10)
                        .arg("KEYSONLY")
                        .cmd("RANGE")
                        .arg(format!("[{}z", key(i)))
                        .arg("+")
                        .arg("FLOOR")
                        .arg("LIMIT")
                        .arg(1)
                        .arg("KEYSONLY")
                        .query(&mut con)
                        .unwrap_or_else(|e| {
                            // A group just split off that is still electing
                            // its leader, on a machine this test shares,
                            // may answer CLUSTERDOWN: that read is sent
                            // again; only answers are checked. A group
                            // that did not start here within its wait, or
                            // a read that ran out of tries (its map or
                            // timestamp taken again too often), is a
                            // failure.
                            let said = e.to_string();
                            // (A read across ranges that ran out of new
                            // timestamps answers with its last error: a
                            // past that did not reach back to it.)
                            let gave_up = [
                                "has not started",
                                "kept changing",
                                "could not settle",
                                "held past does not reach back",
                            ]
                            .iter()
                            .any(|m| said.contains(m));
                            assert!(
                                (said.contains("ClusterDown") || said.contains("TryAgain"))
                                    && !gave_up,
                                "node {}: {said}",
                                r + 1
                            );
                            unavailable += 1;
                            Default::default()
                        });
                    if dbsize == 0 {
                        continue;
                    }
                    let node = r + 1;
                    assert_eq!(get, format!("v{i}"), "node {node}: GET {}", key(i));
                    assert_eq!(exists, 2, "node {node}: EXISTS");
                    assert_eq!(mget, [format!("v{i}"), format!("v{j}")], "node {node}");
                    assert_eq!(dbsize, KEYS as i64, "node {node}: DBSIZE");
                    let want: Vec<String> = (i..KEYS.min(i + 10)).map(key).collect();
                    assert_eq!(range, want, "node {node}: RANGE from {}", key(i));
                    assert_eq!(floor, [key(i)], "node {node}: FLOOR of {}z", key(i));
                    rounds += 1;
                }
                (rounds, unavailable)
            })
        })
        .collect();
    for s in 1..=SPLITS {
        let at = key(s * KEYS / (SPLITS + 1));
        let via = &nodes[s % 3];
        let (ok, said) = admin(via, &["split", &at], Duration::from_secs(30));
        assert!(ok, "split at {at} through node {}: {said}", via.id);
        std::thread::sleep(Duration::from_millis(100));
    }
    for n in &nodes {
        let deadline = Instant::now() + Duration::from_secs(60);
        while field(&n.info_ranges(), "ranges_hosted") != (SPLITS + 1).to_string() {
            assert!(Instant::now() < deadline, "node {}: {}", n.id, ranges(n));
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    stop.store(true, Ordering::Relaxed);
    for (r, reader) in readers.into_iter().enumerate() {
        let (rounds, unavailable) = reader.join().unwrap();
        eprintln!(
            "node {}: {rounds} rounds of reads answered, {unavailable} unavailable",
            r + 1
        );
        assert!(rounds > 10, "node {}: too few reads to tell", r + 1);
        assert!(
            unavailable <= rounds,
            "node {}: {unavailable} rounds unavailable, {rounds} answered",
            r + 1
        );
    }
    drop(nodes);
    let _ = std::fs::remove_dir_all(&root);
}

/// Ranges split by size as the data grows (see the checks), then, most
/// keys deleted, merge on their own back into one, every acknowledged
/// write kept.
#[test]
fn ranges_split_on_their_own_as_the_data_grows() {
    let root = root("bysize");
    let mut nodes: Vec<Node> = (1..=3).map(|id| Node::new(&root, id)).collect();
    let list = peers(&nodes.iter().collect::<Vec<_>>());
    start_all(&mut nodes, &list, &["--cluster-range-split-bytes", "64kb"]);
    let mut cons: Vec<redis::Connection> = nodes.iter().map(Node::connect).collect();
    let key = |i: usize| format!("key{i:05}");
    let value = "v".repeat(100);
    // 4,000 keys of about 110 bytes each (some 440 KB), in a scattered
    // order, a hundred to a pipeline.
    const KEYS: usize = 4000;
    write_scattered(&mut cons, KEYS, &value);
    let deadline = Instant::now() + Duration::from_secs(60);
    let ranges = loop {
        let r = nodes[0].info_ranges();
        let n: usize = field(&r, "ranges").parse().unwrap_or(0);
        if n >= 4 && field(&r, "ranges_hosted") == n.to_string() {
            break n;
        }
        assert!(Instant::now() < deadline, "{r:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    for (n, con) in cons.iter_mut().enumerate() {
        let count: i64 = redis::cmd("DBSIZE").query(con).unwrap();
        assert_eq!(count as usize, KEYS, "node {}", n + 1);
        let all: Vec<String> = redis::cmd("RANGE")
            .arg("-")
            .arg("+")
            .arg("KEYSONLY")
            .query(con)
            .unwrap();
        assert_eq!(
            all,
            (0..KEYS).map(key).collect::<Vec<_>>(),
            "node {}",
            n + 1
        );
        for i in (0..KEYS).step_by(97) {
            let v: String = redis::cmd("GET").arg(key(i)).query(con).unwrap();
            assert_eq!(v, value);
        }
    }
    // Each split halved a range's bytes: no range holds more than the
    // limit's worth of keys, and none is nearly empty.
    let said = ranges_settled(&nodes[0]);
    let keys: Vec<usize> = said
        .lines()
        .filter_map(|l| l.split(" keys ").nth(1))
        .filter_map(|rest| rest.split(' ').next()?.parse().ok())
        .collect();
    assert!(keys.len() >= ranges, "{said}");
    assert_eq!(keys.iter().sum::<usize>(), KEYS, "{said}");
    assert!(keys.iter().all(|&k| k >= 200), "{said}");
    // Most keys deleted, the ranges fall far below the merge size (a fifth
    // of the split size): neighbours merge on their own, back to one range,
    // while a writer goes on through every node.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = std::sync::Arc::clone(&stop);
        let mut cons: Vec<redis::Connection> = nodes.iter().map(Node::connect).collect();
        std::thread::spawn(move || {
            let mut acked = Vec::new();
            for i in 0.. {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                // Fifty keys spread over the keyspace, rewritten: the data
                // stays small enough to merge.
                let k = format!("key{:05}w", (i % 50) * (KEYS / 50));
                let r: redis::RedisResult<()> =
                    redis::cmd("SET").arg(&k).arg(i).query(&mut cons[i % 3]);
                if r.is_ok() {
                    acked.push((k, i));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            acked
        })
    };
    let kept: Vec<usize> = (0..KEYS).step_by(100).collect();
    for chunk in (0..KEYS)
        .filter(|i| i % 100 != 0)
        .collect::<Vec<_>>()
        .chunks(100)
    {
        let mut del = redis::cmd("DEL");
        for &i in chunk {
            del.arg(key(i));
        }
        // One range's keys at a time (a DEL of two ranges' keys is
        // refused): key by key where the chunk crosses a range's end.
        if del.query::<i64>(&mut cons[0]).is_err() {
            for &i in chunk {
                let _: i64 = redis::cmd("DEL").arg(key(i)).query(&mut cons[1]).unwrap();
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    for n in &nodes {
        loop {
            let r = n.info_ranges();
            if field(&r, "ranges") == "1" && field(&r, "ranges_stale_replicas") == "0" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {}: {r:?}\n{}",
                n.id,
                self::ranges(n)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = writer.join().unwrap();
    assert!(
        acked.len() > 50,
        "the writer got {} writes through",
        acked.len()
    );
    let merges: u64 = nodes
        .iter()
        .map(|n| {
            field(&n.info_ranges(), "ranges_merges")
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    // As many merges as there were ranges at the end of the growth, less
    // one (the first count above may have been taken before the last
    // splits).
    assert!(
        merges as usize >= ranges - 1,
        "{merges} merges of {ranges} ranges"
    );
    // Each key holds its last acknowledged write, or a later one sent.
    let mut last: std::collections::BTreeMap<String, usize> = Default::default();
    for (k, i) in &acked {
        last.insert(k.clone(), *i);
    }
    for (n, con) in cons.iter_mut().enumerate() {
        for (k, i) in &last {
            let v: i64 = redis::cmd("GET").arg(k).query(con).unwrap();
            assert!(
                v >= *i as i64 && v % 50 == *i as i64 % 50,
                "node {}: {k} {v} < {i}",
                n + 1
            );
        }
        for &i in &kept {
            let v: String = redis::cmd("GET").arg(key(i)).query(con).unwrap();
            assert_eq!(v, value);
        }
        let count: i64 = redis::cmd("DBSIZE").query(con).unwrap();
        assert_eq!(count as usize, kept.len() + last.len(), "node {}", n + 1);
    }
    drop(nodes);
    let _ = std::fs::remove_dir_all(&root);
}

/// `combkv cluster ranges` once it gives this node's keys for every range
/// it lists (a split's new group starts a moment after the map has it).
fn ranges_settled(node: &Node) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let said = ranges(node);
        let listed = said
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("ranges:"))
            .and_then(|n| n.trim().parse::<usize>().ok());
        if listed == Some(said.lines().filter(|l| l.contains(" keys ")).count()) {
            return said;
        }
        assert!(Instant::now() < deadline, "{said}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Five processes whose ranges split by size and are placed on three
/// nodes each (`--cluster-range-replicas 3`): once the placement settles,
/// no node holds every range, yet every key is read through every node
/// (a range a node holds no replica of is read at one that does), and
/// writes through every node land. A sixth node added takes its share of
/// the ranges; a node removed hands its replicas to the others. Most keys
/// then deleted, small neighbours are lined up on the same nodes and
/// merge (at least half the ranges go).
#[test]
fn ranges_placed_on_three_of_five_nodes_are_read_through_every_node() {
    let root = root("placed");
    let mut nodes: Vec<Node> = (1..=5).map(|id| Node::new(&root, id)).collect();
    // One event loop each: a read that held its loop would hold the others.
    let args = [&PLACED[..], &["--threads", "1"]].concat();
    let list = peers(&nodes.iter().collect::<Vec<_>>());
    // memcached on a unix socket of each node's own (`lru_crawler
    // metadump` through a node that holds only some of the ranges).
    for n in nodes.iter_mut() {
        let sock = memcached_socket(n);
        n.start_with(
            &list,
            &[&args[..], &["--memcached-unixsocket", &sock]].concat(),
        );
    }
    find_leader(&nodes);
    wait_serving(&nodes);
    let mut cons: Vec<redis::Connection> = nodes.iter().map(Node::connect).collect();
    let key = |i: usize| format!("key{i:05}");
    const KEYS: usize = 3000;
    let value = "v".repeat(100);
    write_scattered(&mut cons, KEYS, &value);
    // Settled: at least four ranges, each but range 0 on three of the
    // members, every member holding some but not all of them, and no
    // replica left where a range moved away from.
    let settled = |members: &[&Node], what: &str| {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let infos: Vec<_> = members.iter().map(|n| n.info_ranges()).collect();
            let ranges: usize = field(&infos[0], "ranges").parse().unwrap_or(0);
            let hosted: Vec<usize> = infos
                .iter()
                .map(|r| field(r, "ranges_hosted").parse().unwrap_or(0))
                .collect();
            let stale: usize = infos
                .iter()
                .map(|r| {
                    field(r, "ranges_stale_replicas")
                        .parse::<usize>()
                        .unwrap_or(0)
                })
                .sum();
            if ranges >= 4
                && hosted.iter().sum::<usize>() == members.len() + 3 * (ranges - 1)
                && hosted.iter().all(|&h| h > 1 && h < ranges)
                && stale == 0
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not placed: {infos:?}\n{}",
                self::ranges(members[0])
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    settled(&nodes.iter().collect::<Vec<_>>(), "five nodes");
    // What this test wrote over the first values, by key number.
    let mut written: std::collections::HashMap<usize, String> = Default::default();
    let mut check = |cons: &mut [redis::Connection], round: &str| {
        for (n, con) in cons.iter_mut().enumerate() {
            let all: Vec<String> = redis::cmd("RANGE")
                .arg("-")
                .arg("+")
                .arg("KEYSONLY")
                .query(con)
                .unwrap();
            assert_eq!(all, (0..KEYS).map(key).collect::<Vec<_>>(), "{round} {n}");
            let count: i64 = redis::cmd("DBSIZE")
                .query(con)
                .unwrap_or_else(|e| panic!("{round} {n}: DBSIZE: {e}"));
            assert_eq!(count as usize, KEYS, "{round} {n}");
            let keys: Vec<String> = (0..KEYS).step_by(131).map(key).collect();
            let got: Vec<String> = redis::cmd("MGET")
                .arg(&keys)
                .query(con)
                .unwrap_or_else(|e| panic!("{round} {n}: MGET: {e}"));
            let want: Vec<String> = (0..KEYS)
                .step_by(131)
                .map(|i| written.get(&i).cloned().unwrap_or_else(|| value.clone()))
                .collect();
            assert_eq!(got, want, "{round} {n}");
            // A snapshot of every range, taken through a node that holds
            // only some: the writes after it are not in it.
            let snap: i64 = redis::cmd("SNAPSHOT")
                .arg("CREATE")
                .arg("EX")
                .arg(60)
                .query(con)
                .unwrap();
            let before: Vec<(usize, String)> = (0..KEYS)
                .step_by(293)
                .map(|i| (i, written.get(&i).cloned().unwrap_or_else(|| value.clone())))
                .collect();
            for i in (0..KEYS).step_by(293) {
                let v = format!("{round}{n}");
                written.insert(i, v.clone());
                let _: () = redis::cmd("SET").arg(key(i)).arg(&v).query(con).unwrap();
                let got: String = redis::cmd("GET").arg(key(i)).query(con).unwrap();
                assert_eq!(got, v, "{round} {n} key {i}");
            }
            for (i, old) in &before {
                let got: String = redis::cmd("GETAT")
                    .arg(snap)
                    .arg(key(*i))
                    .query(con)
                    .unwrap();
                assert_eq!(&got, old, "{round} {n}: key {i} at the snapshot");
            }
            let at: Vec<String> = redis::cmd("RANGEAT")
                .arg(snap)
                .arg("-")
                .arg("+")
                .query(con)
                .unwrap();
            let keys_at: Vec<&String> = at.iter().step_by(2).collect();
            assert_eq!(keys_at.len(), KEYS, "{round} {n}");
            for (i, old) in &before {
                assert_eq!(&at[2 * i + 1], old, "{round} {n}: RANGEAT key {i}");
            }
            let released: i64 = redis::cmd("SNAPSHOT")
                .arg("RELEASE")
                .arg(snap)
                .query(con)
                .unwrap();
            assert_eq!(released, 1);
            let gone: redis::RedisResult<Option<String>> =
                redis::cmd("GETAT").arg(snap).arg(key(0)).query(con);
            assert!(gone.is_err(), "{round} {n}: {gone:?}");
        }
    };
    check(&mut cons, "five");
    reads_elsewhere_leave_the_loop_free(&nodes, KEYS);
    // Every snapshot taken was released: each range dropped its replicas'
    // pins through its log (they would otherwise keep the store's past,
    // and the ranges from merging, for the snapshots' 60 s).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pins: Vec<u64> = nodes
            .iter()
            .map(|n| {
                field(&n.info_ranges(), "ranges_snapshot_pins")
                    .parse()
                    .unwrap()
            })
            .collect();
        if pins.iter().all(|&p| p == 0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "released snapshots still pinned: {pins:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // A sixth node joins: it takes its share of the ranges.
    let mut sixth = Node::new(&root, 6);
    sixth.start_with("", &args);
    let leader = find_leader(&nodes);
    let (ok, said) = admin(
        leader,
        &["add", "6", &sixth.raft.to_string()],
        Duration::from_secs(60),
    );
    assert!(ok, "{said}");
    nodes.push(sixth);
    settled(&nodes.iter().collect::<Vec<_>>(), "six nodes");
    cons.push(nodes[5].connect());
    check(&mut cons, "six");

    // A node leaves: its replicas are handed to the others, and it keeps
    // none once out.
    let leader_id = find_leader(&nodes).id;
    let gone = if leader_id == 2 { 3 } else { 2 };
    remove(&nodes, gone);
    let stay: Vec<&Node> = nodes.iter().filter(|n| n.id != gone).collect();
    settled(&stay, "after a removal");
    nodes[gone as usize - 1].kill();
    cons.remove(gone as usize - 1);
    check(&mut cons, "five again");

    // Most keys deleted: small neighbours on different nodes are lined up
    // (one moved onto the other's nodes, the placement staying balanced)
    // and merge; every key left is still read through every node.
    let stay: Vec<&Node> = nodes.iter().filter(|n| n.id != gone).collect();
    let before: usize = field(&stay[0].info_ranges(), "ranges").parse().unwrap();
    for i in (0..KEYS).filter(|i| i % 100 != 0) {
        let _: i64 = redis::cmd("DEL").arg(key(i)).query(&mut cons[0]).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(240);
    let after = loop {
        let infos: Vec<_> = stay.iter().map(|n| n.info_ranges()).collect();
        let ranges: usize = field(&infos[0], "ranges").parse().unwrap_or(0);
        let stale: usize = infos
            .iter()
            .map(|r| {
                field(r, "ranges_stale_replicas")
                    .parse::<usize>()
                    .unwrap_or(0)
            })
            .sum();
        if ranges <= before / 2 && stale == 0 {
            break ranges;
        }
        assert!(
            Instant::now() < deadline,
            "{before} ranges merged down to {ranges} only: {infos:?}\n{}",
            self::ranges(stay[0])
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    eprintln!("{before} ranges merged into {after}");
    for (n, con) in cons.iter_mut().enumerate() {
        let all: Vec<String> = redis::cmd("RANGE")
            .arg("-")
            .arg("+")
            .arg("KEYSONLY")
            .query(con)
            .unwrap();
        let kept: Vec<String> = (0..KEYS).step_by(100).map(key).collect();
        assert_eq!(all, kept, "node {n}");
        let count: i64 = redis::cmd("DBSIZE").query(con).unwrap();
        assert_eq!(count as usize, kept.len(), "node {n}");
    }
    drop(cons);
    drop(nodes);
    let _ = std::fs::remove_dir_all(&root);
}

/// Where node `n` serves memcached (`--memcached-unixsocket`).
fn memcached_socket(n: &Node) -> String {
    n.dir
        .with_extension("mc.sock")
        .to_str()
        .unwrap()
        .to_string()
}

/// A read that waits for another node parks its connection, and the event
/// loop serves the others meanwhile: on a node with one event loop, a
/// range it holds no replica of has every node that holds one stopped
/// (SIGSTOP; with one voter stopped, a read may be answered by another);
/// EXISTS of a key there, and DBSIZE (every range at
/// one timestamp), wait for them, while PING on a third connection of the
/// same loop is answered at once. Both answer once the nodes run again,
/// and so does an EXISTS whose client closed its side of the connection
/// (EOF) while it waited: a parked request is answered before the
/// connection's end is acted on. memcached's `lru_crawler metadump`
/// through the same node waits too, and then lists every key. So does an
/// EXEC of a transaction that reads the key at a snapshot (GETAT), and
/// it then answers the snapshot's value. (A read that held the loop would
/// hold the PING for the remote read's 10 s deadline.)
fn reads_elsewhere_leave_the_loop_free(nodes: &[Node], keys: usize) {
    use std::io::{ErrorKind, Read, Write};
    use std::net::TcpStream;
    // The placement may still move a replica, which can change where the
    // chosen range is read: a probe whose range changed in the map
    // meanwhile is taken again; one whose range did not change must wait.
    let mut probes = 0;
    for attempt in 1.. {
        let listed = ranges(&nodes[0]);
        // `range 3 ["key00123", "key00456") epoch .. voters [1, 2, 4] ...`,
        // a range no node but its voters holds (no learner: not moving).
        let parsed: Vec<(String, Vec<u64>, String)> = listed
            .lines()
            .filter(|l| l.starts_with("range ") && !l.contains("learners"))
            .filter_map(|l| {
                let start = l.split('"').nth(1)?.to_string();
                let voters = l.split("voters [").nth(1)?.split(']').next()?;
                let voters = voters.split(", ").filter_map(|v| v.parse().ok()).collect();
                let desc = l.split(" leader ").next()?.to_string();
                Some((start, voters, desc))
            })
            .collect();
        let (via, key, voters, desc) = nodes
            .iter()
            .find_map(|n| {
                parsed
                    .iter()
                    .find(|(start, voters, _)| start.starts_with("key") && !voters.contains(&n.id))
                    .map(|(start, voters, desc)| (n, start.clone(), voters.clone(), desc.clone()))
            })
            .unwrap_or_else(|| panic!("no node without a replica of a range: {listed}"));
        if !ranges(via).lines().any(|l| l.starts_with(desc.as_str())) {
            // Node 1's map and this one's differ: not settled yet.
            assert!(attempt < 60, "maps differ: {listed}\n{}", ranges(via));
            std::thread::sleep(Duration::from_millis(500));
            continue;
        }
        let stopped: Vec<&Node> = nodes.iter().filter(|n| voters.contains(&n.id)).collect();
        let pause = |paused: bool| stopped.iter().for_each(|n| n.pause(paused));
        // Taken through the node that reads it (snapshot ids are its own);
        // released on every way out, so that no pin outlives the probe.
        let snap: i64 = redis::cmd("SNAPSHOT")
            .arg("CREATE")
            .arg("EX")
            .arg(60)
            .query(&mut via.connect())
            .unwrap();
        let release = || {
            let released: i64 = redis::cmd("SNAPSHOT")
                .arg("RELEASE")
                .arg(snap)
                .query(&mut via.connect())
                .unwrap();
            assert_eq!(released, 1);
        };
        let connect = || {
            let s = TcpStream::connect(via.resp).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            s
        };
        let (mut exists, mut dbsize, mut ping) = (connect(), connect(), connect());
        let mut closed = connect();
        let mut txn = connect();
        let queue = format!(
            "*1\r\n$5\r\nMULTI\r\n*3\r\n$5\r\nGETAT\r\n${}\r\n{snap}\r\n${}\r\n{key}\r\n",
            snap.to_string().len(),
            key.len()
        );
        txn.write_all(queue.as_bytes()).unwrap();
        let mut queued = [0u8; 14];
        txn.read_exact(&mut queued).unwrap();
        assert_eq!(&queued, b"+OK\r\n+QUEUED\r\n");
        let mut dump = std::os::unix::net::UnixStream::connect(memcached_socket(via)).unwrap();
        dump.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        eprintln!(
            "nodes {voters:?} stopped; reading {key} through node {} ({desc})",
            via.id
        );
        pause(true);
        let cmd = format!("*2\r\n$6\r\nEXISTS\r\n${}\r\n{key}\r\n", key.len());
        exists.write_all(cmd.as_bytes()).unwrap();
        dbsize.write_all(b"*1\r\n$6\r\nDBSIZE\r\n").unwrap();
        closed.write_all(cmd.as_bytes()).unwrap();
        closed.shutdown(std::net::Shutdown::Write).unwrap();
        txn.write_all(b"*1\r\n$4\r\nEXEC\r\n").unwrap();
        dump.write_all(b"lru_crawler metadump all\r\n").unwrap();
        std::thread::sleep(Duration::from_secs(1));
        ping.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        ping.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
        let mut buf = [0u8; 64];
        let n = ping.read(&mut buf);
        let pinged = n.as_ref().ok().map(|&n| buf[..n].to_vec());
        // Each connection: still waiting, or what it was answered.
        let mut early = Vec::new();
        for s in [&mut exists, &mut dbsize, &mut closed, &mut txn] {
            s.set_nonblocking(true).unwrap();
            early.push(match s.read(&mut buf) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => None,
                other => Some(format!("{other:?} {:?}", String::from_utf8_lossy(&buf))),
            });
            s.set_nonblocking(false).unwrap();
        }
        dump.set_nonblocking(true).unwrap();
        early.push(match dump.read(&mut buf) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => None,
            other => Some(format!("{other:?}")),
        });
        dump.set_nonblocking(false).unwrap();
        pause(false);
        assert_eq!(
            pinged.as_deref(),
            Some(&b"+PONG\r\n"[..]),
            "PING waited behind reads of a stopped node: {n:?}"
        );
        if early.iter().any(Option::is_some) {
            // Whatever EXEC answers, the snapshot is done with.
            let mut rest = [0u8; 256];
            txn.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
            let _ = txn.read(&mut rest);
            release();
            let now = ranges(via);
            let moved = !now.lines().any(|l| l.starts_with(desc.as_str()));
            probes += 1;
            if moved && probes < 3 {
                eprintln!("range of {key} changed during the probe ({early:?}): again\n{now}");
                continue;
            }
            panic!(
                "EXISTS, DBSIZE, EXISTS before EOF, EXEC, metadump answered with their nodes \
                 stopped ({desc}): {early:?}\nmap now:\n{now}"
            );
        }
        let mut answer = |s: &mut TcpStream| {
            let n = s.read(&mut buf).unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        };
        let want: i64 = redis::cmd("EXISTS")
            .arg(&key)
            .query(&mut via.connect())
            .unwrap();
        assert_eq!(answer(&mut exists), format!(":{want}\r\n"), "EXISTS {key}");
        assert_eq!(answer(&mut dbsize), format!(":{keys}\r\n"), "DBSIZE");
        let value: String = redis::cmd("GET")
            .arg(&key)
            .query(&mut via.connect())
            .unwrap();
        let exec = format!("*1\r\n${}\r\n{value}\r\n", value.len());
        let mut got = vec![0u8; exec.len()];
        txn.read_exact(&mut got).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&got),
            exec,
            "EXEC [GETAT {snap} {key}]"
        );
        release();
        let mut rest = Vec::new();
        closed.read_to_end(&mut rest).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&rest),
            format!(":{want}\r\n"),
            "EXISTS {key} sent before the client's EOF, then the connection's end"
        );
        let mut listed = Vec::new();
        let mut chunk = vec![0u8; 64 << 10];
        while !listed.ends_with(b"END\r\n") {
            let n = dump.read(&mut chunk).unwrap();
            assert!(n > 0, "metadump ended without END");
            listed.extend_from_slice(&chunk[..n]);
        }
        let lines: Vec<&[u8]> = listed.split(|&b| b == b'\n').collect();
        let items = lines.iter().filter(|l| l.starts_with(b"key=")).count();
        assert_eq!(items, keys, "metadump through node {}", via.id);
        return;
    }
}

/// SETs `key00000`... up to `keys` to `value`, in a scattered order, a
/// hundred to a pipeline, each pipeline through the next connection.
fn write_scattered(cons: &mut [redis::Connection], keys: usize, value: &str) {
    for (turn, chunk) in (0..keys).collect::<Vec<_>>().chunks(100).enumerate() {
        let mut pipe = redis::pipe();
        for &i in chunk {
            pipe.cmd("SET")
                .arg(format!("key{:05}", (i * 7919) % keys))
                .arg(value)
                .ignore();
        }
        let n = cons.len();
        let _: () = pipe.query(&mut cons[turn % n]).unwrap();
    }
}

/// Writers go on through every node while ranges split on their own and a
/// node is killed with SIGKILL and started again: every write that was
/// acknowledged is there afterwards, through every node, with its value or
/// a later one sent (whose answer was lost), never an older one.
#[test]
fn acknowledged_writes_survive_splits_and_a_killed_node() {
    let root = root("splitkill");
    let mut nodes: Vec<Node> = (1..=3).map(|id| Node::new(&root, id)).collect();
    let list = peers(&nodes.iter().collect::<Vec<_>>());
    let args = ["--cluster-range-split-bytes", "64kb"];
    start_all(&mut nodes, &list, &args);
    const WRITERS: usize = 3;
    const KEYS: usize = 300;
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.resp).collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|t| {
            let (addrs, stop) = (addrs.clone(), std::sync::Arc::clone(&stop));
            std::thread::spawn(move || {
                // Per key: (acknowledged, sent) rounds.
                let mut seen = vec![(0usize, 0usize); KEYS];
                let mut via = t;
                let mut con: Option<redis::Connection> = None;
                let mut round = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || round < 3 {
                    round += 1;
                    for (j, s) in seen.iter_mut().enumerate() {
                        let value = format!("{round:06}{}", "x".repeat(300));
                        s.1 = round;
                        let c = match &mut con {
                            Some(c) => c,
                            None => {
                                let client =
                                    redis::Client::open(format!("redis://{}/", addrs[via % 3]));
                                match client.and_then(|c| {
                                    c.get_connection_with_timeout(Duration::from_secs(1))
                                }) {
                                    Ok(c) => con.insert(c),
                                    Err(_) => {
                                        via += 1;
                                        std::thread::sleep(Duration::from_millis(50));
                                        continue;
                                    }
                                }
                            }
                        };
                        let _ = c.set_read_timeout(Some(Duration::from_secs(15)));
                        match redis::cmd("SET")
                            .arg(format!("key{j:04}-{t}"))
                            .arg(&value)
                            .query::<()>(c)
                        {
                            Ok(()) => s.0 = round,
                            Err(_) => {
                                con = None;
                                via += 1;
                            }
                        }
                    }
                }
                seen
            })
        })
        .collect();
    // Once the keyspace has split, node 3 is killed and started again.
    let wait_ranges = |nodes: &[Node], n: usize, within: u64| {
        let deadline = Instant::now() + Duration::from_secs(within);
        loop {
            let r = nodes[0].info_ranges();
            if field(&r, "ranges").parse::<usize>().unwrap_or(0) >= n {
                return;
            }
            assert!(Instant::now() < deadline, "fewer than {n} ranges: {r:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    wait_ranges(&nodes, 2, 120);
    nodes[2].kill();
    std::thread::sleep(Duration::from_secs(1));
    nodes[2].start_with(&list, &args);
    wait_serving(&nodes);
    wait_ranges(&nodes, 4, 120);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let seen: Vec<Vec<(usize, usize)>> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    for n in &nodes {
        let mut con = n.connect();
        for (t, keys) in seen.iter().enumerate() {
            for (j, &(acked, sent)) in keys.iter().enumerate() {
                let v: Option<String> = redis::cmd("GET")
                    .arg(format!("key{j:04}-{t}"))
                    .query(&mut con)
                    .unwrap();
                let got: usize = v.map_or(0, |v| v[..6].parse().unwrap());
                assert!(
                    got >= acked && got <= sent,
                    "node {}: key{j:04}-{t} is at round {got}, acknowledged {acked}, sent {sent}",
                    n.id
                );
            }
        }
    }
    drop(nodes);
    let _ = std::fs::remove_dir_all(&root);
}

/// One writer's keys: per key, the last round acknowledged and the last
/// round sent (a SET whose answer was lost may or may not have applied).
type Seen = Vec<(usize, usize)>;

/// Writer `t`: SETs its `keys` keys (`w{t}-{j}`) round after round, each
/// round in a scattered order, to a value that starts with the round,
/// through the nodes of `addrs` (the next one after an error), until
/// `stop` is set and it has finished a round.
fn range_writer(
    t: usize,
    keys: usize,
    addrs: &std::sync::Mutex<Vec<SocketAddr>>,
    stop: &std::sync::atomic::AtomicBool,
) -> Seen {
    let mut seen = vec![(0, 0); keys];
    let mut via = t;
    let mut con: Option<redis::Connection> = None;
    let mut round = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) || round < 2 {
        round += 1;
        let value = format!("{round:06}{}", "x".repeat(300));
        let mut j = 0;
        while j < keys {
            let k = (j * 7919 + t) % keys;
            let c = match &mut con {
                Some(c) => c,
                None => {
                    let addr = {
                        let a = addrs.lock().unwrap();
                        a[via % a.len()]
                    };
                    let opened = redis::Client::open(format!("redis://{addr}/"))
                        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)));
                    match opened {
                        Ok(c) => {
                            let _ = c.set_read_timeout(Some(Duration::from_secs(15)));
                            con.insert(c)
                        }
                        Err(_) => {
                            via += 1;
                            std::thread::sleep(Duration::from_millis(50));
                            continue;
                        }
                    }
                }
            };
            seen[k].1 = round;
            match redis::cmd("SET")
                .arg(format!("w{t}-{k:04}"))
                .arg(&value)
                .query::<()>(c)
            {
                Ok(()) => seen[k].0 = round,
                Err(_) => {
                    con = None;
                    via += 1;
                }
            }
            j += 1;
        }
    }
    seen
}

/// Ranges and replicas per member of `members` (range 0, on every member,
/// not counted) once placement has settled: every range but range 0 on
/// three members, no member two replicas above another, no replica left
/// behind by a move. Waits up to `within`; returns (ranges, replicas per
/// member, leaders per member).
fn placement_settled(
    members: &[&Node],
    at_least: usize,
    within: Duration,
    what: &str,
) -> (usize, Vec<usize>, Vec<usize>) {
    let deadline = Instant::now() + within;
    loop {
        let infos: Vec<_> = members.iter().map(|n| n.info_ranges()).collect();
        let number = |r: &std::collections::BTreeMap<String, String>, f: &str| {
            field(r, f).parse::<usize>().unwrap_or(0)
        };
        let ranges = number(&infos[0], "ranges");
        let hosted: Vec<usize> = infos
            .iter()
            .map(|r| number(r, "ranges_hosted").saturating_sub(1))
            .collect();
        let leading: Vec<usize> = infos.iter().map(|r| number(r, "ranges_leading")).collect();
        let stale: usize = infos
            .iter()
            .map(|r| number(r, "ranges_stale_replicas"))
            .sum();
        let (lo, hi) = (
            hosted.iter().min().copied().unwrap_or(0),
            hosted.iter().max().copied().unwrap_or(0),
        );
        if ranges >= at_least
            && hosted.iter().sum::<usize>() == 3 * (ranges - 1)
            && hi <= lo + 1
            && stale == 0
            && infos.iter().all(|r| number(r, "ranges") == ranges)
        {
            return (ranges, hosted, leading);
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not placed within {within:?}: {infos:?}\n{}",
            self::ranges(members[0])
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Waits until the leaders of the ranges are spread over `members`: every
/// member leads some, none more than three above another (the balance
/// moves a leadership while one node leads two more than a voter of that
/// range; range 0's leader counts one more). Returns the leaders per
/// member.
fn leaders_spread(members: &[&Node], what: &str) -> Vec<usize> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let leading: Vec<usize> = members
            .iter()
            .map(|n| {
                field(&n.info_ranges(), "ranges_leading")
                    .parse()
                    .unwrap_or(0)
            })
            .collect();
        let (lo, hi) = (
            leading.iter().min().copied().unwrap_or(0),
            leading.iter().max().copied().unwrap_or(0),
        );
        if lo > 0 && hi <= lo + 3 {
            return leading;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: leaders not spread: {leading:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A node whose Raft traffic runs through a proxy that `cut` can close.
fn proxied(root: &std::path::Path, id: u64, cut: &std::sync::Arc<Cut>) -> (Node, Proxy) {
    let mut n = Node::new(root, id);
    let p = Proxy::start(id, n.raft, cut.clone());
    n.advertise = Some(p.addr);
    (n, p)
}

/// The acceptance run of ranges: five processes, writers through the
/// `redis` crate on every node from start to end, data that grows until
/// the keyspace has split into 16 or more ranges, each placed on three of
/// the five nodes; while it splits and moves, random nodes are killed
/// with SIGKILL and started again, one at a time, and one is cut off from
/// the others for a few seconds. Then a sixth node is added and takes its
/// share of the replicas, and a node is removed and hands its replicas to
/// the others, writers still running. Afterwards every acknowledged write
/// is there with its value (or a later one sent, whose answer was lost),
/// through every member, and every key is listed once.
#[test]
fn five_nodes_split_into_sixteen_ranges_under_kills_and_a_partition() {
    use rand::{Rng, SeedableRng};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    let seed: u64 = support::env_number("COMBKV_RANGES_SEED", rand::random());
    eprintln!("COMBKV_RANGES_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let root = root("life");
    let cut = Arc::new(Cut::default());
    let (mut nodes, mut proxies): (Vec<Node>, Vec<Proxy>) =
        (1..=5).map(|id| proxied(&root, id, &cut)).unzip();
    let (list, args) = (peers(&nodes.iter().collect::<Vec<_>>()), PLACED);
    start_all(&mut nodes, &list, &args);
    let started = Instant::now();
    let log = |what: &str| eprintln!("{:6.1} s: {what}", started.elapsed().as_secs_f64());
    // Placement settled over `members` with 16 or more ranges, logged.
    let settled = |members: &[&Node], what: &str| {
        let (n, hosted, leading) = placement_settled(members, 16, Duration::from_secs(240), what);
        log(&format!(
            "{n} ranges placed {what}: replicas {hosted:?}, leaders {leading:?}"
        ));
        hosted
    };

    const WRITERS: usize = 4;
    const KEYS: usize = 1000;
    let addrs = Arc::new(Mutex::new(nodes.iter().map(|n| n.resp).collect::<Vec<_>>()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|t| {
            let (addrs, stop) = (Arc::clone(&addrs), Arc::clone(&stop));
            std::thread::spawn(move || range_writer(t, KEYS, &addrs, &stop))
        })
        .collect();
    let number_of_ranges = |nodes: &[Node]| {
        nodes
            .iter()
            .filter(|n| n.child.is_some())
            .filter_map(|n| n.try_status().map(|_| n.info_ranges()))
            .map(|r| field(&r, "ranges").parse::<usize>().unwrap_or(0))
            .max()
            .unwrap_or(0)
    };
    let wait_ranges = |nodes: &[Node], n: usize, within: u64| {
        let deadline = Instant::now() + Duration::from_secs(within);
        while number_of_ranges(nodes) < n {
            assert!(Instant::now() < deadline, "fewer than {n} ranges");
            std::thread::sleep(Duration::from_millis(200));
        }
    };

    // Disruptions, one at a time, once the keyspace has begun to split:
    // three kills of random nodes and a partition, in a random order.
    wait_ranges(&nodes, 2, 120);
    let mut plan = vec![None, None, None, Some(())];
    for i in (1..plan.len()).rev() {
        plan.swap(i, rng.random_range(0..=i));
    }
    for partition in plan {
        let victim = rng.random_range(0..nodes.len());
        let id = nodes[victim].id;
        let ranges_now = number_of_ranges(&nodes);
        if partition.is_some() {
            log(&format!("cut node {id} off ({ranges_now} ranges)"));
            cut.isolate(id);
            std::thread::sleep(Duration::from_millis(rng.random_range(2000..4000)));
            cut.heal();
            log(&format!("node {id} reconnected"));
        } else {
            log(&format!("kill -9 node {id} ({ranges_now} ranges)"));
            nodes[victim].kill();
            std::thread::sleep(Duration::from_millis(rng.random_range(200..1500)));
            nodes[victim].start_with(&list, &args);
            log(&format!("node {id} restarted"));
        }
        wait_serving(&nodes);
        std::thread::sleep(Duration::from_millis(rng.random_range(500..1500)));
    }
    wait_ranges(&nodes, 16, 240);
    settled(&nodes.iter().collect::<Vec<_>>(), "on five nodes");

    // A sixth node joins while the writers go on, and takes its share.
    let (mut sixth, p) = proxied(&root, 6, &cut);
    proxies.push(p);
    sixth.start_with("", &args);
    let (ok, said) = admin(
        find_leader(&nodes),
        &["add", "6", &sixth.raft_reached_at().to_string()],
        Duration::from_secs(60),
    );
    assert!(ok, "{said}");
    nodes.push(sixth);
    addrs.lock().unwrap().push(nodes[5].resp);
    let hosted = settled(&nodes.iter().collect::<Vec<_>>(), "on six nodes");
    assert!(hosted[5] > 0, "the sixth node holds no range: {hosted:?}");
    let leading = leaders_spread(&nodes.iter().collect::<Vec<_>>(), "six nodes");
    log(&format!("leaders spread over six nodes: {leading:?}"));

    // A node leaves while the writers go on: its replicas go to the others.
    let leader_id = find_leader(&nodes).id;
    let gone = (1..=5).find(|&i| i != leader_id).unwrap();
    remove(&nodes, gone);
    let stay: Vec<&Node> = nodes.iter().filter(|n| n.id != gone).collect();
    settled(
        &stay,
        &format!("on the five left after node {gone}'s removal"),
    );
    stop.store(true, Ordering::Relaxed);
    let seen: Vec<Seen> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    let gone_node = nodes.iter().position(|n| n.id == gone).unwrap();
    nodes[gone_node].kill();

    // Every acknowledged write, through every member; every key listed
    // once, and counted once.
    let mut present = Vec::new();
    for n in nodes.iter().filter(|n| n.id != gone) {
        let mut con = n.connect();
        present.clear();
        for (t, keys) in seen.iter().enumerate() {
            let names: Vec<String> = (0..keys.len()).map(|k| format!("w{t}-{k:04}")).collect();
            for (chunk, part) in names.chunks(100).zip(keys.chunks(100)) {
                let got: Vec<Option<String>> =
                    redis::cmd("MGET").arg(chunk).query(&mut con).unwrap();
                for ((name, v), &(acked, sent)) in chunk.iter().zip(got).zip(part) {
                    let round: usize = v.as_ref().map_or(0, |v| v[..6].parse().unwrap());
                    assert!(
                        round >= acked && round <= sent,
                        "node {}: {name} is at round {round}, acknowledged {acked}, sent {sent} \
                         (COMBKV_RANGES_SEED={seed})",
                        n.id
                    );
                    if v.is_some() {
                        present.push(name.clone());
                    }
                }
            }
        }
        present.sort();
        let listed: Vec<String> = redis::cmd("RANGE")
            .arg("-")
            .arg("+")
            .arg("KEYSONLY")
            .query(&mut con)
            .unwrap();
        assert_eq!(listed, present, "node {}", n.id);
        let count: usize = redis::cmd("DBSIZE").query(&mut con).unwrap();
        assert_eq!(count, present.len(), "node {}", n.id);
    }
    log(&format!(
        "{} keys, every acknowledged write found through every member",
        present.len()
    ));
    drop(nodes);
    drop(proxies);
    let _ = std::fs::remove_dir_all(&root);
}
