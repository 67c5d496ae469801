//! Moves of ranges, simulated: a range moved to the nodes the map names,
//! and five nodes that split and move ranges under writers and readers,
//! drops, a partition and a crash of every node.
//!
//! `COMBKV_SIM_SCHEDULES=N` runs N seeds of the seeded test (8 by
//! default); `COMBKV_SIM_SEED=S` the one seed S.

use std::sync::Arc;
use std::time::Duration;

use combkv_replica::network::sim::{Faults, SimNet};
use groups::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[allow(dead_code)]
mod groups;

/// A range moves: the map is told to hold range 1 on nodes 1, 2 and 4
/// instead of 1, 2 and 3, and range 1's leader follows it: node 4 (a new
/// member of the cluster) is added as a learner, starts its replica on the
/// leader's first message (the map names it), gets a snapshot, catches up
/// and votes; only then is node 3 removed. Range 0 stays on its members.
#[test]
fn a_range_moves_to_the_replicas_the_map_names() {
    simulate("groups-move", |dir| async move {
        let cl = Cluster::new(dir.clone(), SimNet::new(3, Faults::NONE), NODES + 1, 0);
        cl.start_all(NODES).await;
        let g0 = cl.replica(1, 0).unwrap();
        for n in 0..40 {
            g0.write(1, put_op(&kv(n), b"v")).await.unwrap();
        }
        let host1 = cl.nodes.lock().get(&1).cloned().unwrap();
        assert_eq!(host1.split(0, b"k20").await.unwrap(), 1);
        for id in 1..=NODES {
            wait_group(&cl, id, 1).await;
        }
        // Past a snapshot's worth of entries (30): range 1's log before it
        // is purged, so a new replica can catch up only by a snapshot.
        let l1 = wait_leader(&cl, 1, &[1, 2, 3]).await;
        for n in 0..40 {
            l1.write(1, put_op(&kv(20 + n % 20), b"w")).await.unwrap();
        }
        // Node 4 joins the cluster (group 0), then range 1 is moved.
        cl.start(4, &[0]).await;
        let leader = wait_leader(&cl, 0, &[1, 2, 3]).await;
        add(&leader, 4).await;
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
        // Node 4 caught up by a snapshot its range's leader sent: counted
        // whole on both sides, none under way any more (INFO's
        // `ranges_snapshots_*`).
        let t4 = cl.replica(4, 1).unwrap().snapshot_transfers();
        assert_eq!((t4.received, t4.receiving), (1, 0), "node 4: {t4:?}");
        let sent: u64 = [1, 2]
            .into_iter()
            .map(|id| cl.replica(id, 1).unwrap().snapshot_transfers().sent)
            .sum();
        assert_eq!(sent, 1);
        // Node 3 asks range 1's leader, hears it is no member, and deletes
        // its replica, files and all; a restart does not bring it back.
        let dropped = dir.join("node3/group0/groups/1");
        let mut gone = false;
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if cl.replica(3, 1).is_none() && !dropped.exists() {
                gone = true;
                break;
            }
        }
        assert!(gone, "node 3 kept its replica of range 1");
        let stats = |id: u64| cl.nodes.lock().get(&id).unwrap().range_stats();
        let three = stats(3);
        assert_eq!(
            (
                three.ranges,
                three.hosted,
                three.stale,
                three.replicas_deleted
            ),
            (2, 1, 0, 1),
            "{three:?}"
        );
        // The split applied on every node (node 4 replayed it with group
        // 0's log when it joined); range 1's leaders added node 4 and
        // removed node 3.
        let all: Vec<_> = (1..=NODES + 1).map(stats).collect();
        let splits: Vec<u64> = all.iter().map(|s| s.splits).collect();
        assert_eq!(splits, [1, 1, 1, 1], "{all:?}");
        assert_eq!(
            all.iter().map(|s| s.replicas_added).sum::<u64>(),
            1,
            "{all:?}"
        );
        assert_eq!(
            all.iter().map(|s| s.replicas_removed).sum::<u64>(),
            1,
            "{all:?}"
        );
        assert_eq!(all[3].hosted, 2, "node 4 holds both ranges: {all:?}");
        cl.stop(3).await;
        cl.start(3, &[0]).await;
        assert!(cl.replica(3, 1).is_none(), "a restart started it again");
        assert!(cl.replica(1, 1).is_some(), "a wanted replica was deleted");
        // The map says where range 1 is, and range 0 is untouched.
        let map = cl.replica(4, 0).unwrap().range_map().unwrap();
        assert_eq!(map.get(1).unwrap().voters, vec![1, 2, 4]);
        assert_eq!(map.get(0).unwrap().voters, vec![1, 2, 3, 4]);
        for id in 1..=NODES + 1 {
            cl.stop(id).await;
        }
    });
}

/// Leaders are handed over until they are spread: three nodes, the
/// keyspace split into seven ranges (each on all three nodes), whose
/// groups elect leaders as they happen to; the meta group's leader has
/// leaderships handed over until no node leads two ranges more than
/// another, while a writer goes on writing every range's keys through
/// node 1. Every acknowledged write is on every replica afterwards, and
/// the replicas of each range are equal.
#[test]
fn leaders_are_handed_over_until_spread_while_writes_go_on() {
    simulate("groups-leaders", |dir| async move {
        let cl = Cluster::new(dir.clone(), SimNet::new(11, Faults::NONE), NODES, 0);
        cl.start_all(NODES).await;
        const KEYS: usize = 70;
        split_in_seven(&cl).await;
        let before = leading(&cl);
        // The writer: round after round over every key, each write through
        // node 1's replica of the key's range (forwarded to its leader).
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (cl, stop) = (Arc::clone(&cl), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut acked = vec![0u64; KEYS];
                let mut round = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    round += 1;
                    for (n, a) in acked.iter_mut().enumerate() {
                        let g = (n / 10) as u64;
                        let Some(r) = cl.replica(1, g) else { continue };
                        let value = round.to_string().into_bytes();
                        if let Ok(res) = r.write(1, put_op(&kv(n), &value)).await
                            && res[0].is_ok()
                        {
                            *a = round;
                        }
                    }
                }
                acked
            })
        };
        let spread = |now: &[usize]| now.iter().max().unwrap() - now.iter().min().unwrap() <= 1;
        let moved = || cl.leaders_moved();
        let first = leaders_until(&cl, "leaders never spread", spread).await;
        eprintln!(
            "leaders per node: {before:?}, after {} hand-overs {first:?}",
            moved()
        );
        assert_eq!(first, vec![2, 2, 2]);
        // Node 3 stops: its ranges elect leaders on nodes 1 and 2. Started
        // again it leads nothing, and only hand-overs give it its share.
        cl.stop(3).await;
        let without = leaders_until(&cl, "node 3's ranges elect no leaders", |n| n[2] == 0).await;
        let (before_restart, restarted) = (moved(), tokio::time::Instant::now());
        cl.start(3, &[0]).await;
        let again = leaders_until(&cl, "leaders never spread to the restarted node", spread).await;
        eprintln!(
            "node 3 stopped: {without:?}; restarted: {again:?} after {} hand-overs in {:.1} s",
            moved() - before_restart,
            restarted.elapsed().as_secs_f64()
        );
        assert_eq!(again, vec![2, 2, 2]);
        assert!(
            moved() >= before_restart + 2,
            "leaders moved but not by hand-overs"
        );
        // Writes went on through the hand-overs.
        tokio::time::sleep(Duration::from_secs(2)).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let acked = writer.await.unwrap();
        assert!(acked.iter().all(|&a| a >= 2), "{acked:?}");
        for g in 0..=6 {
            converge(&cl, g).await.unwrap();
        }
        for (n, &a) in acked.iter().enumerate() {
            let g = (n / 10) as u64;
            for id in 1..=NODES {
                let got = cl
                    .replica(id, g)
                    .unwrap()
                    .current_store()
                    .get(&kv(n))
                    .unwrap();
                let round: u64 = String::from_utf8(got.unwrap().to_vec())
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!(
                    round >= a,
                    "key {n} on node {id}: round {round}, acknowledged {a}"
                );
            }
        }
        for id in 1..=NODES {
            cl.stop(id).await;
        }
    });
}

/// Leaders are spread by load: three nodes with splits by load on (at
/// 1,000 requests a second, which no range reaches here), the keyspace in
/// seven ranges whose leaders are first spread by count (two each). Two
/// writers then write as fast as they are answered, each to the keys of
/// one of the two ranges node 1 leads: node 1 leads all the load. The meta
/// group's leader swaps one of them for a quiet range of another node
/// (counts stay two each), and once the two busy ranges are led by two
/// nodes nothing moves for 10 s: a second step would only move the heat.
#[test]
fn leaders_are_spread_by_load_and_then_stay() {
    simulate("groups-leader-load", |dir| async move {
        let cl = Cluster::new(dir.clone(), SimNet::new(12, Faults::NONE), NODES, 0);
        cl.start_all_with(NODES, |c| {
            c.split_load = 1_000;
        })
        .await;
        split_in_seven(&cl).await;
        let spread = |now: &[usize]| now.iter().max().unwrap() - now.iter().min().unwrap() <= 1;
        assert_eq!(
            leaders_until(&cl, "leaders never spread", spread).await,
            vec![2, 2, 2]
        );
        let leader_of =
            |g: u64| (1..=NODES).find(|&id| cl.replica(id, g).is_some_and(|r| r.is_leader()));
        let hot: Vec<u64> = (1..=6).filter(|&g| leader_of(g) == Some(1)).collect();
        assert_eq!(hot.len(), 2, "node 1 leads {hot:?}");
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut writers = Vec::new();
        for &g in &hot {
            let (cl, stop) = (Arc::clone(&cl), Arc::clone(&stop));
            writers.push(tokio::spawn(async move {
                let mut acked = 0u64;
                let mut n = 0usize;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n += 1;
                    let key = kv(g as usize * 10 + n % 10);
                    let Some(r) = cl.replica(1, g) else { break };
                    match r.write(1, put_op(&key, b"v")).await {
                        Ok(res) if res[0].is_ok() => acked += 1,
                        _ => tokio::time::sleep(Duration::from_millis(10)).await,
                    }
                }
                acked
            }));
        }
        let started = tokio::time::Instant::now();
        let apart = loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if let (Some(a), Some(b)) = (leader_of(hot[0]), leader_of(hot[1]))
                && a != b
            {
                break (a, b);
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the busy ranges {hot:?} are still led by one node"
            );
        };
        let counts = leading(&cl);
        eprintln!(
            "busy ranges {hot:?} led by nodes {apart:?} after {:.1} s; leads per node {counts:?}",
            started.elapsed().as_secs_f64()
        );
        assert!(spread(&counts), "the count rule broken: {counts:?}");
        // Nothing more moves while the load holds.
        let moved = || cl.leaders_moved();
        let before = moved();
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(moved(), before, "leaders moved on");
        assert_eq!(
            (leader_of(hot[0]), leader_of(hot[1])),
            (Some(apart.0), Some(apart.1))
        );
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for w in writers {
            let acked = w.await.unwrap();
            assert!(acked > 100, "a writer had {acked} writes acknowledged");
        }
        for g in 0..=6 {
            converge(&cl, g).await.unwrap();
        }
        for id in 1..=NODES {
            cl.stop(id).await;
        }
    });
}

/// A leader hands its group to the voter it names, each time: the voter
/// stands first, while the leader is silent and the others still wait.
/// Writes before and after every hand-over are on every replica.
#[test]
fn a_leader_hands_over_to_the_voter_it_names() {
    simulate("groups-handover", |dir| async move {
        let cl = Cluster::new(dir.clone(), SimNet::new(5, Faults::NONE), NODES, 0);
        cl.start_all(NODES).await;
        for turn in 0..6usize {
            let leader = wait_leader(&cl, 0, &[1, 2, 3]).await;
            leader.write(1, put_op(&kv(turn), b"v")).await.unwrap();
            let to = (1..=NODES)
                .filter(|&n| n != leader.id())
                .nth(turn % 2)
                .unwrap();
            leader.hand_over(to).await.unwrap();
            let now = wait_leader(&cl, 0, &[1, 2, 3]).await;
            assert_eq!(
                now.id(),
                to,
                "turn {turn}: node {} handed to {to}",
                leader.id()
            );
            // Refused: a node that does not lead, and a voter that is not.
            assert!(leader.hand_over(to).await.is_err());
            assert!(now.hand_over(now.id()).await.is_err());
            now.write(1, put_op(&kv(turn + 10), b"v")).await.unwrap();
        }
        converge(&cl, 0).await.unwrap();
        for id in 1..=NODES {
            let store = cl.replica(id, 0).unwrap().current_store();
            for turn in 0..6 {
                assert!(store.get(&kv(turn)).unwrap().is_some(), "node {id}");
                assert!(store.get(&kv(turn + 10)).unwrap().is_some(), "node {id}");
            }
        }
        for id in 1..=NODES {
            cl.stop(id).await;
        }
    });
}

/// Splits the keyspace at `kv(10)`, `kv(20)` ... `kv(60)` through node 1
/// (ranges 1 to 6 after range 0, keys `kv(10 * g)` on), and waits until
/// every node runs all seven.
async fn split_in_seven(cl: &Cluster) {
    for i in 1..=6 {
        if let Err(e) = split_through(cl, &kv(i * 10), Some(1), 100).await {
            panic!("the split at {i}0 never went through: {e}");
        }
    }
    for g in 1..=6 {
        for id in 1..=NODES {
            wait_group(cl, id, g).await;
        }
    }
}

/// While a snapshot pins the ranges, placement takes no step for balance:
/// three nodes hold ranges 1 to 3 (three replicas each) when a snapshot
/// is taken and a fourth node joins. A move now would start a replica on
/// node 4 without the snapshot's pin and take one that holds it away. For
/// 10 s nothing is placed on node 4, and every replica still reads the
/// snapshot; once it is released node 4 takes its share.
#[test]
fn placement_for_balance_waits_while_a_snapshot_pins_the_ranges() {
    simulate("groups-pins-place", |dir| async move {
        let cl = Cluster::new(dir.clone(), SimNet::new(8, Faults::NONE), NODES + 1, 0);
        cl.start_all_with(NODES, |c| {
            c.range_replicas = 3;
        })
        .await;
        let g0 = cl.replica(1, 0).unwrap();
        for n in 0..40 {
            g0.write(1, put_op(&kv(n), b"old")).await.unwrap();
        }
        for i in 1..=3 {
            split_through(&cl, &kv(i * 10), Some(1), 100)
                .await
                .expect("a split");
        }
        for g in 1..=3 {
            for id in 1..=NODES {
                wait_group(&cl, id, g).await;
            }
        }
        let host = cl.host(1).unwrap();
        let ttl = Duration::from_secs(60);
        let at = host.snapshot(ttl).await.unwrap();
        cl.start(4, &[0]).await;
        add(&wait_leader(&cl, 0, &[1, 2, 3]).await, 4).await;
        let on_4 = || {
            let map = cl.replica(1, 0).unwrap().range_map().unwrap();
            (1..=3)
                .filter(|&g| map.get(g).is_some_and(|d| d.voters.contains(&4)))
                .count()
        };
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(on_4(), 0, "a range was placed on node 4 while pinned");
        for g in 1..=3u64 {
            for id in 1..=NODES {
                let r = cl.replica(id, g).unwrap();
                let key = kv(g as usize * 10);
                let then = r
                    .pinned_at(at)
                    .map(|view| view.get(&key).unwrap().is_some());
                assert_eq!(then, Ok(true), "range {g} on node {id}, at the snapshot");
            }
        }
        assert_eq!(host.release(at, ttl).await, 0);
        for _ in 0..600 {
            if on_4() >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            on_4() >= 2,
            "node 4 holds {} ranges after the release",
            on_4()
        );
        for id in 1..=NODES + 1 {
            cl.stop(id).await;
        }
    });
}

/// A snapshot taken while a merge is under way waits for it: three nodes,
/// ranges 1 (`m` on) and 2 (`t` on), range 1 asked to merge with 2, and a
/// snapshot as soon as the map records the merge. Pinned before the
/// merged range's group absorbed range 2's keys, the pin would hold its
/// store without them (the absorb inserts them, old versions and all,
/// after the hold), and the snapshot's reads would miss them; taken
/// after, every replica reads both halves at it.
#[test]
fn a_snapshot_taken_during_a_merge_reads_the_merged_range() {
    simulate("groups-pins-merge", |dir| async move {
        let cl = Cluster::new(dir.clone(), SimNet::new(19, Faults::NONE), NODES, 0);
        let all = [1, 2, 3];
        ranges_at_m_and_t(&cl).await;
        let host = cl.host(1).unwrap();
        let merging = {
            let host = host.clone();
            // Asked again while range 2's group is still settling.
            tokio::spawn(async move {
                let mut last = None;
                for _ in 0..100 {
                    match host.merge(1).await {
                        Ok(right) => return Ok(right),
                        Err(e) => last = Some(e),
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(last.unwrap())
            })
        };
        let mut polls = 0;
        while !cl
            .replica(1, 0)
            .and_then(|r| r.range_map())
            .is_some_and(|m| m.is_merging(1))
        {
            polls += 1;
            if merging.is_finished() || polls > 20_000 {
                panic!("the merge was never seen under way: {:?}", merging.await);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        eprintln!("merge seen under way after {polls} polls");
        let ttl = Duration::from_secs(60);
        let at = host.snapshot(ttl).await.expect("a snapshot");
        assert_eq!(merging.await.unwrap().expect("the merge"), 2);
        for id in all {
            let r = cl.replica(id, 1).unwrap();
            let mut read = None;
            for _ in 0..50 {
                read = r
                    .pinned_at(at)
                    .ok()
                    .map(|view| [b"m1", b"t1"].map(|k| view.get(k).unwrap().is_some()));
                if read.is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert_eq!(read, Some([true, true]), "node {id}, at the snapshot");
        }
        assert_eq!(host.release(at, ttl).await, 0);
        for id in all {
            cl.stop(id).await;
        }
    });
}

/// Starts the three nodes of `cl`, writes `a1`, `m1` and `t1`, and splits
/// ranges 1 (`m` on) and 2 (`t` on) off range 0, started on every node.
async fn ranges_at_m_and_t(cl: &Cluster) {
    cl.start_all(NODES).await;
    let all = [1, 2, 3];
    let g0 = wait_leader(cl, 0, &all).await;
    for k in [b"a1", b"m1", b"t1"] {
        g0.write(g0.clock_ms(), put_op(k, b"old")).await.unwrap();
    }
    for at in [b"m", b"t"] {
        split_through(cl, at, Some(1), 100).await.expect("a split");
    }
    for g in 1..=2 {
        for id in all {
            wait_group(cl, id, g).await;
        }
    }
}

/// How many of ranges 1 to 6 each of nodes 1 to 3 leads.
fn leading(cl: &Cluster) -> Vec<usize> {
    (1..=NODES)
        .map(|id| {
            (1..=6)
                .filter(|&g| cl.replica(id, g).is_some_and(|r| r.is_leader()))
                .count()
        })
        .collect()
}

/// Waits (up to 60 s simulated) until every one of ranges 1 to 6 has a
/// leader and the leaders per node satisfy `want`; fails saying `what`.
async fn leaders_until(cl: &Cluster, what: &str, want: impl Fn(&[usize]) -> bool) -> Vec<usize> {
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = leading(cl);
        if now.iter().sum::<usize>() == 6 && want(&now) {
            return now;
        }
    }
    panic!("{what}: {:?}", leading(cl))
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
    let result = simulate(&format!("groups-five-{seed}"), |dir| async move {
        let cl = Cluster::new(dir.clone(), SimNet::new(seed, FAULTY), FIVE, seed);
        cl.start_all(FIVE).await;
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
        split_move_crash(&cl, &mut rng, [b"k3", b"k6"]).await?;
        let mut outcomes = Vec::new();
        for c in clients {
            outcomes.push(c.await.map_err(|e| format!("a client failed: {e}"))?);
        }
        // Range 1 ends on nodes 2, 4 and 5 only.
        settle_after_move(&cl, &outcomes).await?;
        Ok(outcomes.iter().map(|o| o.1).sum::<usize>())
    });
    report(seed, result);
}

#[test]
fn five_nodes_split_and_move_ranges_under_faults_and_lose_nothing() {
    seeds(8).into_iter().for_each(ranges_under_faults);
}

/// Ranges spread over five nodes: splitting by size as writers fill the
/// keyspace, and placed by the meta group's leader on three nodes each
/// (`range_replicas`), so that no node holds two more range replicas than
/// another. Every key is on the three members of its range's group, and
/// each of those holds the range's keys alike.
#[test]
fn ranges_spread_over_five_nodes_three_replicas_each() {
    const FIVE: u64 = 5;
    const KEYS: usize = 3000;
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
    simulate("groups-spread", |dir| async move {
        let cl = Cluster::new(dir.clone(), SimNet::new(5, Faults::NONE), FIVE, 0);
        cl.start_all_with(FIVE, |c| {
            c.split_bytes = 64 << 10;
            c.range_replicas = 3;
        })
        .await;
        let value = vec![b'v'; 100];
        let key = |n: usize| format!("key{n:06}").into_bytes();
        for n in 0..KEYS {
            let k = key((n * 7919) % KEYS);
            let mut written = false;
            for _ in 0..2000 {
                let Some(map) = cl.replica(1, 0).unwrap().range_map() else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                // Through a node the map names for the range (a node the
                // range moved away from may still hold an old replica).
                let desc = map.route(&k).clone();
                let Some(r) = desc.voters.iter().find_map(|&id| cl.replica(id, desc.id)) else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                if matches!(r.write(1, put_op(&k, &value)).await, Ok(res) if res[0].is_ok()) {
                    written = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(written, "key {n} never written");
        }
        // Until the placement settles: every range but 0 led by a member
        // of exactly the three nodes the map names.
        let mut settled = None;
        let began = tokio::time::Instant::now();
        for _ in 0..6000 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let map = cl.replica(1, 0).unwrap().range_map().unwrap();
            let all_placed = map.ranges().filter(|r| r.id != 0).all(|r| {
                r.voters.len() == 3
                    && r.voters
                        .iter()
                        .find_map(|&id| cl.replica(id, r.id).filter(|x| x.is_leader()))
                        .is_some_and(|l| {
                            let mut m: Vec<u64> = l.status().nodes.iter().map(|n| n.0).collect();
                            m.sort_unstable();
                            m == r.voters
                        })
            });
            if all_placed && crate::groups::placement_step(&map, FIVE).is_none() {
                settled = Some(map);
                break;
            }
        }
        let Some(map) = settled else {
            let map = cl.replica(1, 0).unwrap().range_map().unwrap();
            let mut said = String::new();
            for r in map.ranges() {
                said.push_str(&format!("\n  map: {r}"));
                for id in 1..=FIVE {
                    if let Some(x) = cl.replica(id, r.id) {
                        said.push_str(&format!(
                            "\n    node {id}: leader {} members {:?} {}",
                            x.is_leader(),
                            x.status()
                                .nodes
                                .iter()
                                .map(|n| (n.0, n.2))
                                .collect::<Vec<_>>(),
                            x.bounds()
                        ));
                    }
                }
            }
            panic!(
                "the placement never settled; next step {:?}:{said}",
                crate::groups::placement_step(&map, FIVE)
            );
        };
        eprintln!(
            "{} ranges, placed in {:.1} s (simulated) after the last write",
            map.len(),
            began.elapsed().as_secs_f64()
        );
        assert!(map.len() >= 4, "{} ranges", map.len());
        let mut load = std::collections::BTreeMap::new();
        for r in map.ranges().filter(|r| r.id != 0) {
            eprintln!("  {r}");
            for v in &r.voters {
                *load.entry(*v).or_insert(0usize) += 1;
            }
            converge_on(&cl, r.id, &r.voters).await.unwrap();
        }
        let counts: Vec<usize> = (1..=FIVE)
            .map(|n| load.get(&n).copied().unwrap_or(0))
            .collect();
        assert!(
            counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1,
            "replicas per node: {counts:?}"
        );
        // Leaders spread too: hand-overs until no node leads two ranges
        // more than another (range 0 aside).
        let leading = || {
            (1..=FIVE)
                .map(|id| {
                    map.ranges()
                        .filter(|r| r.id != 0)
                        .filter(|r| cl.replica(id, r.id).is_some_and(|x| x.is_leader()))
                        .count()
                })
                .collect::<Vec<usize>>()
        };
        let before = leading();
        let mut spread = None;
        for _ in 0..1200 {
            let now = leading();
            if now.iter().sum::<usize>() == map.len() - 1
                && now.iter().max().unwrap() - now.iter().min().unwrap() <= 1
            {
                spread = Some(now);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let spread = spread.unwrap_or_else(|| {
            panic!(
                "leaders never spread: {before:?} at placement, {:?} now",
                leading()
            )
        });
        eprintln!("leaders per node: {before:?} at placement, {spread:?} spread");
        for n in 0..KEYS {
            let k = key(n);
            let r = map.route(&k);
            for &id in &r.voters {
                let got = cl
                    .replica(id, r.id)
                    .unwrap()
                    .current_store()
                    .get(&k)
                    .unwrap();
                assert_eq!(
                    got.as_deref(),
                    Some(&value[..]),
                    "key {n} on node {id} range {}",
                    r.id
                );
            }
        }
        for id in 1..=FIVE {
            cl.stop(id).await;
        }
    });
}

/// Starts node `id` of `cl` with ranges that split by size and are placed
/// on three nodes each, a node down for 5 s placed as gone.
async fn start_placing(cl: &Cluster, id: u64) {
    let host = combkv_replica::Host::simulated(id, &cl.net);
    let mut c = config(&cl.dir, id, 0, &cl.storage[&(id, 0)]);
    c.split_bytes = 64 << 10;
    c.range_replicas = 3;
    c.node_down_after = Some(Duration::from_secs(5));
    host.start_group(0, &c).await.unwrap();
    host.start_split_groups().await.unwrap();
    cl.net.set_down(id, false);
    cl.nodes.lock().insert(id, host);
}

/// Whether every range but range 0 is on three of `on`, as the map says
/// and as its leader's membership says, and the scheduler has no step
/// left over `on`.
fn placed_on(cl: &Cluster, on: &[u64]) -> Option<combkv_replica::ranges::RangeMap> {
    let map = cl.replica(on[0], 0)?.range_map()?;
    let all_placed = map.ranges().filter(|r| r.id != 0).all(|r| {
        r.voters.len() == 3
            && r.voters.iter().all(|v| on.contains(v))
            && r.voters
                .iter()
                .find_map(|&id| cl.replica(id, r.id).filter(|x| x.is_leader()))
                .is_some_and(|l| {
                    let mut m: Vec<u64> = l.status().nodes.iter().map(|n| n.0).collect();
                    m.sort_unstable();
                    m == r.voters
                })
    });
    (all_placed && combkv_replica::ranges::next_placement(&map, on, 3).is_none()).then_some(map)
}

/// [`placed_on`], waited for (up to 600 s simulated).
async fn wait_placed_on(cl: &Cluster, on: &[u64]) -> Option<combkv_replica::ranges::RangeMap> {
    for _ in 0..6000 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Some(map) = placed_on(cl, on) {
            return Some(map);
        }
    }
    None
}

/// A node down longer than the setting is placed as gone: five nodes with
/// ranges on three each; node 5 stops, and once 5 s have passed every
/// range it held gets a third replica on the other four, every key still
/// on each of its range's replicas. Node 5, back, has its stale replicas
/// deleted and is given its share again.
#[test]
fn the_ranges_of_a_node_down_past_the_setting_are_re_replicated() {
    const FIVE: u64 = 5;
    const KEYS: usize = 2000;
    simulate("groups-down", |dir| async move {
        let cl = Cluster::new(dir.clone(), SimNet::new(9, Faults::NONE), FIVE, 0);
        for id in 1..=FIVE {
            start_placing(&cl, id).await;
        }
        cl.form(&(1..=FIVE).collect::<Vec<_>>()).await;
        let value = vec![b'v'; 100];
        let key = |n: usize| format!("key{n:06}").into_bytes();
        for n in 0..KEYS {
            let k = key((n * 7919) % KEYS);
            let mut written = false;
            for _ in 0..2000 {
                let r = cl.replica(1, 0).unwrap().range_map().and_then(|map| {
                    let desc = map.route(&k).clone();
                    desc.voters.iter().find_map(|&id| cl.replica(id, desc.id))
                });
                if let Some(r) = r
                    && matches!(r.write(1, put_op(&k, &value)).await, Ok(res) if res[0].is_ok())
                {
                    written = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(written, "key {n} never written");
        }
        let all: Vec<u64> = (1..=FIVE).collect();
        let map = wait_placed_on(&cl, &all)
            .await
            .expect("the placement never settled on five nodes");
        let on_five = map
            .ranges()
            .filter(|r| r.voters.contains(&5) && r.id != 0)
            .count();
        assert!(on_five > 0, "node 5 holds no range: {map:?}");
        eprintln!("{} ranges placed, {on_five} on node 5", map.len());

        cl.stop(5).await;
        let stopped = tokio::time::Instant::now();
        let four: Vec<u64> = (1..=4).collect();
        let map = wait_placed_on(&cl, &four)
            .await
            .expect("node 5's ranges were never placed on the other four");
        let took = stopped.elapsed();
        eprintln!(
            "{on_five} ranges on node 5 re-replicated on the other four {:.1} s after it stopped",
            took.as_secs_f64()
        );
        // Its last answer came up to a second (a survey's period) before
        // it stopped.
        assert!(
            took >= Duration::from_secs(4),
            "placed as gone after {took:?}"
        );
        for r in map.ranges().filter(|r| r.id != 0) {
            converge_on(&cl, r.id, &r.voters).await.unwrap();
        }
        for n in 0..KEYS {
            let r = map.route(&key(n));
            // Range 0 follows the membership, node 5 still in it.
            for &id in r.voters.iter().filter(|&&id| id != 5) {
                let store = cl.replica(id, r.id).unwrap().current_store();
                assert!(
                    store.get(&key(n)).unwrap().is_some(),
                    "key {n} missing on node {id}'s replica of range {}",
                    r.id
                );
            }
        }

        // Back: its stale replicas go, and it is given replicas again.
        start_placing(&cl, 5).await;
        let mut back = false;
        for _ in 0..6000 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let stats = cl.nodes.lock().get(&5).unwrap().range_stats();
            if placed_on(&cl, &all).is_some() && stats.stale == 0 && stats.hosted > 1 {
                back = true;
                break;
            }
        }
        assert!(back, "node 5 was not given its share again");
        for id in 1..=FIVE {
            cl.stop(id).await;
        }
    });
}

/// Splits at `at` by hand through node `via` (none: whichever node leads
/// the meta group at each try), tried up to `tries` times 100 ms apart
/// while refused (a leader being elected, a map just changed): the new
/// range's id, or the last refusal.
async fn split_through(
    cl: &Cluster,
    at: &[u8],
    via: Option<u64>,
    tries: usize,
) -> Result<u64, String> {
    split_through_when(cl, at, via, combkv_replica::Pinned::Refuse, tries).await
}

/// [`split_through`], carried out even while a snapshot pins the range
/// with [`combkv_replica::Pinned::Force`].
async fn split_through_when(
    cl: &Cluster,
    at: &[u8],
    via: Option<u64>,
    pinned: combkv_replica::Pinned,
    tries: usize,
) -> Result<u64, String> {
    let mut last = String::from("not tried");
    for i in 0..tries {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let ids: Vec<u64> = cl.nodes.lock().keys().copied().collect();
        let via = via.or_else(|| {
            ids.into_iter()
                .find(|&id| cl.replica(id, 0).is_some_and(|r| r.is_leader()))
        });
        match via.and_then(|id| cl.host(id)) {
            Some(host) => match host.split_at(at, pinned).await {
                Ok(id) => return Ok(id),
                Err(e) => last = e.to_string(),
            },
            None => last = "no node leads the meta group".into(),
        }
    }
    Err(last)
}

/// The bytes each range's leader holds (its store's memory, as the meta
/// group's leader asks it), for every range but range 0 that has one.
fn range_bytes(
    cl: &Cluster,
    map: &combkv_replica::ranges::RangeMap,
) -> std::collections::BTreeMap<u64, u64> {
    map.ranges()
        .filter(|r| r.id != 0)
        .filter_map(|r| {
            let l = (1..=5u64).find_map(|id| cl.replica(id, r.id).filter(|x| x.is_leader()))?;
            let m = l.current_store().memory();
            Some((r.id, m.node_bytes + m.value_bytes))
        })
        .collect()
}

/// Placed by bytes: five nodes, seven ranges placed on three each by
/// count; then two ranges that share two nodes take 24 and 16 MiB, so
/// that those two nodes hold far more than the others. The meta group's
/// leader moves and swaps replicas until no step by bytes is left: the
/// nodes' replica counts stay within one, the gap between the heaviest
/// and the lightest node narrows, and every key is on each of its range's
/// three replicas.
#[test]
fn ranges_are_placed_so_that_nodes_hold_similar_bytes() {
    const FIVE: u64 = 5;
    simulate("groups-bytes", |dir| async move {
        let cl = Cluster::new(dir.clone(), SimNet::new(11, Faults::NONE), FIVE, 0);
        cl.start_all_with(FIVE, |c| {
            c.range_replicas = 3;
        })
        .await;
        let all: Vec<u64> = (1..=FIVE).collect();
        for at in ["b", "c", "d", "e", "f", "g", "h"] {
            if let Err(e) = split_through(&cl, at.as_bytes(), None, 200).await {
                panic!("no split at {at}: {e}");
            }
        }
        let map = wait_placed_on(&cl, &all).await.expect("placed by count");
        assert_eq!(map.len(), 8);
        // Two ranges sharing two nodes, made heavy.
        let ranges: Vec<_> = map.ranges().filter(|r| r.id != 0).cloned().collect();
        let (a, b) = ranges
            .iter()
            .flat_map(|a| ranges.iter().map(move |b| (a, b)))
            .find(|(a, b)| {
                a.id < b.id && a.voters.iter().filter(|v| b.voters.contains(v)).count() == 2
            })
            .expect("two ranges sharing two nodes");
        let value = vec![b'v'; 1 << 20];
        let mut keys = Vec::new();
        for (r, mib) in [(a, 24), (b, 16)] {
            for n in 0..mib {
                let mut k = r.start.clone();
                k.extend_from_slice(format!("{n:04}").as_bytes());
                let mut written = false;
                for _ in 0..300 {
                    let map = cl.replica(1, 0).unwrap().range_map().unwrap();
                    let desc = map.route(&k).clone();
                    let leader = desc
                        .voters
                        .iter()
                        .find_map(|&id| cl.replica(id, desc.id).filter(|x| x.is_leader()));
                    if let Some(l) = leader
                        && matches!(l.write(l.clock_ms(), put_op(&k, &value)).await, Ok(res) if res[0].is_ok())
                    {
                        written = true;
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                assert!(written, "{k:?} never written");
                keys.push(k);
            }
        }
        let spread = |map: &combkv_replica::ranges::RangeMap,
                      sizes: &std::collections::BTreeMap<u64, u64>| {
            let held: Vec<(usize, u64)> = all
                .iter()
                .map(|n| {
                    map.ranges()
                        .filter(|r| r.id != 0 && r.voters.contains(n))
                        .fold((0, 0), |(c, s), r| {
                            (c + 1, s + sizes.get(&r.id).copied().unwrap_or(0))
                        })
                })
                .collect();
            let bytes = held.iter().map(|h| h.1);
            (bytes.clone().max().unwrap() - bytes.min().unwrap(), held)
        };
        let (before, held_before) = spread(&map, &range_bytes(&cl, &map));
        let mut settled = None;
        for _ in 0..3000 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let Some(map) = placed_on(&cl, &all) else {
                continue;
            };
            let sizes = range_bytes(&cl, &map);
            if sizes.len() == 7
                && combkv_replica::ranges::next_byte_move(&map, &all, 3, &sizes, 0).is_empty()
            {
                settled = Some((map, sizes));
                break;
            }
        }
        let (map, sizes) = settled.expect("no end to the placement by bytes");
        let (after, held) = spread(&map, &sizes);
        eprintln!("nodes' (replicas, bytes): {held_before:?} by count, {held:?} by bytes");
        assert!(
            after < before,
            "the gap did not narrow: {before} -> {after}"
        );
        let counts: Vec<usize> = held.iter().map(|h| h.0).collect();
        assert!(
            counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1,
            "{counts:?}"
        );
        for k in &keys {
            let r = map.route(k);
            converge_on(&cl, r.id, &r.voters).await.unwrap();
            for &id in &r.voters {
                let got = cl
                    .replica(id, r.id)
                    .unwrap()
                    .current_store()
                    .get(k)
                    .unwrap();
                assert_eq!(got.as_deref(), Some(&value[..]), "{k:?} on node {id}");
            }
        }
        for id in 1..=FIVE {
            cl.stop(id).await;
        }
    });
}

/// A split by hand asked through a node that holds no replica of the
/// range: it asks the range's voters over the network how many snapshot
/// timestamps they hold pinned (`Request::Pins`), and while a snapshot's
/// pin lives the split is refused, changing nothing; once the snapshot is
/// released it goes ahead.
#[test]
fn a_split_through_a_node_without_the_range_asks_its_voters_for_pins() {
    const FIVE: u64 = 5;
    simulate("groups-pins-remote", |dir| async move {
        let cl = Cluster::new(dir.clone(), SimNet::new(13, Faults::NONE), FIVE, 0);
        for id in 1..=FIVE {
            start_placing(&cl, id).await;
        }
        let all: Vec<u64> = (1..=FIVE).collect();
        cl.form(&all).await;
        let range = split_through(&cl, b"m", None, 100)
            .await
            .expect("a split at m");
        let map = wait_placed_on(&cl, &all).await.expect("placed");
        let voters = map.get(range).unwrap().voters.clone();
        let via = *all.iter().find(|n| !voters.contains(n)).unwrap();
        // Until a replica a move left there is deleted.
        for _ in 0..600 {
            if cl.replica(via, range).is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            cl.replica(via, range).is_none(),
            "node {via} still holds range {range}"
        );
        let host = cl.host(via).unwrap();
        let ttl = Duration::from_secs(60);
        let at = host.snapshot(ttl).await.unwrap();
        let refused = split_through(&cl, b"t", Some(via), 1).await.unwrap_err();
        assert!(refused.contains("pinned by"), "{refused}");
        assert_eq!(cl.replica(1, 0).unwrap().range_map().unwrap().len(), 2);
        assert_eq!(host.release(at, ttl).await, 0);
        split_through(&cl, b"t", Some(via), 100)
            .await
            .expect("the split once the snapshot is released");
        for id in 1..=FIVE {
            cl.stop(id).await;
        }
    });
}

/// A snapshot outlives a forced split of a range it pins: the range split
/// off takes the pins of each replica that applied the split, and reads
/// the keys split off at the snapshot's timestamp from the store they were
/// split from, as they stood then, not as written since. Released, the
/// snapshot's pins go on the new range too.
#[test]
fn a_range_split_off_while_pinned_reads_the_snapshot() {
    simulate("groups-pins-split", |dir| async move {
        let cl = Cluster::new(dir.clone(), SimNet::new(17, Faults::NONE), 3, 0);
        let all = [1, 2, 3];
        for id in all {
            start_placing(&cl, id).await;
        }
        cl.form(&all).await;
        let range = split_through(&cl, b"b", None, 100)
            .await
            .expect("a split at b");
        let leader = wait_leader(&cl, range, &all).await;
        let write = |v: &'static [u8]| {
            let leader = leader.clone();
            async move {
                let r = leader.write(leader.clock_ms(), put_op(b"m1", v)).await;
                assert!(matches!(r, Ok(res) if res[0].is_ok()));
            }
        };
        write(b"old").await;
        let host = cl.host(1).unwrap();
        let ttl = Duration::from_secs(60);
        let at = host.snapshot(ttl).await.unwrap();
        write(b"new").await;
        let child = split_through_when(&cl, b"m", None, combkv_replica::Pinned::Force, 100)
            .await
            .expect("a forced split at m");
        for id in all {
            let r = wait_group(&cl, id, child).await;
            let seen = |item: Option<combkv::Item>| item.map(|it| it.value.to_vec());
            let then = r.pinned_at(at).map(|view| seen(view.get(b"m1").unwrap()));
            assert_eq!(
                then,
                Ok(Some(b"old".to_vec())),
                "node {id}, at the snapshot"
            );
            let now = r.current_store().get(b"m1").unwrap().map(|v| v.to_vec());
            assert_eq!(now, Some(b"new".to_vec()), "node {id}, now");
            assert_eq!(r.snapshot_pins(), 1, "node {id}");
        }
        assert_eq!(host.release(at, ttl).await, 0);
        for id in all {
            let r = cl.replica(id, child).unwrap();
            for _ in 0..100 {
                if r.snapshot_pins() == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert_eq!(r.snapshot_pins(), 0, "node {id}, released");
        }
        for id in all {
            cl.stop(id).await;
        }
    });
}

/// A merge asked by hand while a snapshot pins the two ranges: refused,
/// changing nothing, unless forced; forced, the snapshot's reads of the
/// merged range are refused on every replica rather than answered from
/// the left range's half alone.
#[test]
fn a_merge_while_pinned_is_refused_or_hides_nothing() {
    simulate("groups-pins-merge-by-hand", |dir| async move {
        let cl = Cluster::new(dir.clone(), SimNet::new(23, Faults::NONE), NODES, 0);
        let all = [1, 2, 3];
        ranges_at_m_and_t(&cl).await;
        let host = cl.host(1).unwrap();
        let ttl = Duration::from_secs(60);
        let at = host.snapshot(ttl).await.expect("a snapshot");
        let refused = host.merge(1).await.expect_err("a merge while pinned");
        assert!(
            refused.to_string().contains("pinned by"),
            "refused: {refused}"
        );
        let map = cl.replica(1, 0).and_then(|r| r.range_map()).unwrap();
        assert!(map.get(2).is_some() && !map.is_merging(1), "{map:?}");
        let mut merged = None;
        for _ in 0..100 {
            match host.merge_when(1, combkv_replica::Pinned::Force).await {
                Ok(right) => {
                    merged = Some(right);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        assert_eq!(merged, Some(2), "a forced merge");
        for id in all {
            let r = cl.replica(id, 1).unwrap();
            for _ in 0..100 {
                if r.bounds().end.is_none() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert!(r.bounds().end.is_none(), "node {id}: absorbed");
            let read = r
                .pinned_at(at)
                .map(|view| [b"m1", b"t1"].map(|k| view.get(k).unwrap().is_some()));
            assert!(
                matches!(read, Err(_) | Ok([true, true])),
                "node {id}, at the snapshot: {read:?}"
            );
        }
        for id in all {
            cl.stop(id).await;
        }
    });
}
