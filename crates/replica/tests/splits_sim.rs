//! Splits of ranges, simulated: a split reaching every replica (one cut
//! off included), a split under writers with faults and a crash of every
//! node, and ranges splitting by size on their own.
//!
//! `COMBKV_SIM_SCHEDULES=N` runs N seeds of the seeded test (12 by
//! default); `COMBKV_SIM_SEED=S` the one seed S.

use std::sync::Arc;
use std::time::Duration;

use combkv_replica::network::sim::{Faults, SimNet};
use groups::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[allow(dead_code)]
mod groups;

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
    simulate("groups-split", |dir| async move {
        let cl = Cluster::new(dir.clone(), SimNet::new(2, Faults::NONE), NODES, 0);
        for id in 1..=NODES {
            cl.start(id, &[0]).await;
        }
        cl.form(&(1..=NODES).collect::<Vec<_>>()).await;
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
    let result = simulate(&format!("groups-split-w-{seed}"), |dir| async move {
        let cl = Cluster::new(
            dir.clone(),
            SimNet::new(
                seed,
                Faults {
                    drop_request: 0.03,
                    drop_reply: 0.03,
                    delay_ms: (0, 10),
                },
            ),
            NODES,
            seed,
        );
        for id in 1..=NODES {
            cl.start(id, &[0]).await;
        }
        cl.form(&(1..=NODES).collect::<Vec<_>>()).await;
        let writers: Vec<_> = (0..KEYS)
            .map(|w| {
                let cl = Arc::clone(&cl);
                tokio::spawn(async move {
                    let mut rng = StdRng::seed_from_u64(seed * 1000 + w as u64);
                    let key = format!("k{w}").into_bytes();
                    let (mut acked, mut sent) = (0, 0);
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
                                        acked = n;
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
            // An answer that timed out may hide a split that applied.
            if cl
                .replica(1, 0)
                .and_then(|r| r.range_map())
                .is_some_and(|m| m.route(b"k4").start == b"k4")
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
        let nodes: Vec<u64> = (1..=NODES).collect();
        check_owned(
            &cl,
            &outcomes,
            &[0, 1],
            |_| nodes.clone(),
            |key| {
                if key < b"k4".as_slice() { 0 } else { 1 }
            },
        )?;
        for id in 1..=NODES {
            cl.stop(id).await;
        }
        Ok(outcomes.iter().map(|o| o.1).sum::<usize>())
    });
    report(seed, result);
}

/// Three nodes formed on group 0, which holds "k00" to "k39" (value
/// "v"), written through its leader: the nodes, and that leader.
async fn forty_keys(dir: std::path::PathBuf) -> (Arc<Cluster>, Vec<u64>, combkv_replica::Replica) {
    let cl = Cluster::new(dir, SimNet::new(3, Faults::NONE), NODES, 0);
    let all: Vec<u64> = (1..=NODES).collect();
    for &id in &all {
        cl.start(id, &[0]).await;
    }
    cl.form(&all).await;
    let g0 = wait_leader(&cl, 0, &all).await;
    for n in 0..40 {
        g0.write(g0.clock_ms(), put_op(&kv(n), b"v")).await.unwrap();
    }
    (cl, all, g0)
}

/// The node whose replica of `group` leads it now.
fn leader_of(cl: &Cluster, all: &[u64], group: u64) -> u64 {
    *all.iter()
        .find(|&&id| cl.replica(id, group).is_some_and(|r| r.is_leader()))
        .unwrap()
}

/// The new range's first leader is elected at once, the voter its id
/// picks (range 1 of voters 1, 2, 3: node 2): left to the election timer
/// it had none for a lease and a draw (1.3 s at least), and writes to it
/// waited as long. Simulated time.
#[test]
fn a_range_split_off_has_a_leader_at_once() {
    simulate("groups-split-leader", |dir| async move {
        let (cl, all, _) = forty_keys(dir).await;
        let leader = leader_of(&cl, &all, 0);
        let host = cl.host(leader).unwrap();
        let began = tokio::time::Instant::now();
        assert_eq!(host.split(0, b"k20").await.unwrap(), 1);
        let first = loop {
            if let Some(id) = all
                .iter()
                .find(|&&id| cl.replica(id, 1).is_some_and(|r| r.is_leader()))
            {
                break *id;
            }
            assert!(
                began.elapsed() < Duration::from_secs(5),
                "range 1 has no leader"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let took = began.elapsed();
        assert_eq!(
            first,
            2,
            "range 1's first leader, after {:?}",
            began.elapsed()
        );
        assert!(
            took < Duration::from_millis(800),
            "range 1 had no leader for {took:?}"
        );
        let g1 = cl.replica(2, 1).unwrap();
        g1.write(1, put_op(b"k25", b"after")).await.unwrap();
    });
}

#[test]
fn a_split_under_writers_loses_no_acknowledged_write() {
    seeds(12).into_iter().for_each(split_under_writers);
}

/// Ranges split by size on their own: with `split_bytes` set, writers
/// filling the keyspace make the ranges' leaders split them at their
/// middle keys (each split recorded in the map, each new range splitting
/// further as it grows), and every key ends in exactly one range, with its
/// value, on every replica.
#[test]
fn ranges_split_by_size_on_their_own() {
    const KEYS: usize = 3000;
    simulate("groups-size", |dir| async move {
        let cl = Cluster::new(dir.clone(), SimNet::new(4, Faults::NONE), NODES, 0);
        cl.start_all_with(NODES, |c| {
            c.split_bytes = 128 << 10;
        })
        .await;
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
}

/// A range splits by load: with `split_load` at 50 writes a second, a
/// writer at 10 a second for 10 s splits nothing; one writing as fast as
/// the group applies, to the keys `hot000` to `hot099` among a few cold
/// keys on both sides, splits range 0 within seconds, at a key among the
/// hot ones near their middle, and every key is still there.
#[test]
fn a_range_splits_by_load_at_the_middle_of_its_writes() {
    simulate("groups-load", |dir| async move {
        let cl = Cluster::new(dir.clone(), SimNet::new(6, Faults::NONE), NODES, 0);
        cl.start_all_with(NODES, |c| {
            c.split_load = 50;
        })
        .await;
        let write = |k: Vec<u8>| {
            let cl = Arc::clone(&cl);
            async move {
                for _ in 0..500 {
                    let map = cl.replica(1, 0).unwrap().range_map();
                    let r = map.and_then(|m| cl.replica(1, m.route(&k).id));
                    if let Some(r) = r
                        && matches!(r.write(1, put_op(&k, b"v")).await, Ok(res) if res[0].is_ok())
                    {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                panic!("{} never written", String::from_utf8_lossy(&k));
            }
        };
        for k in ["a1", "a2", "z1", "z2"] {
            write(k.as_bytes().to_vec()).await;
        }
        let ranges = || cl.replica(1, 0).unwrap().range_map().unwrap().len();
        for i in 0..100 {
            write(format!("hot{:03}", i % 100).into_bytes()).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(ranges(), 1, "split at 10 writes a second");
        let started = tokio::time::Instant::now();
        let mut i = 0;
        while ranges() == 1 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no split by load in 30 s"
            );
            write(format!("hot{:03}", (i * 37) % 100).into_bytes()).await;
            i += 1;
        }
        let map = cl.replica(1, 0).unwrap().range_map().unwrap();
        let at = map.ranges().nth(1).unwrap().start.clone();
        eprintln!(
            "split after {i} writes in {:.1} s at {}",
            started.elapsed().as_secs_f64(),
            String::from_utf8_lossy(&at)
        );
        assert!(
            at.as_slice() > b"hot020".as_slice() && at.as_slice() < b"hot080".as_slice(),
            "split at {}",
            String::from_utf8_lossy(&at)
        );
        for r in map.ranges() {
            converge(&cl, r.id).await.unwrap();
        }
        let held: u64 = map
            .ranges()
            .map(|r| cl.replica(2, r.id).unwrap().current_store().len())
            .sum();
        assert_eq!(held, 104, "every key, once");
        for id in 1..=NODES {
            cl.stop(id).await;
        }
    });
}

/// The past a range split off is read in. A read across ranges takes its
/// timestamp; before it reaches a range, a later read raises that range's
/// floor past it, and the range splits. The range split off reads at the
/// first timestamp, its keys as they stood: none changed between the
/// splitting store's last write and the split (`SplitChild::since`), so
/// the read is not taken again (which, with the next split under way,
/// could meet the same again). A range split off after a write inside it
/// later than a read's timestamp refuses that read: it does not hold the
/// value the write replaced.
#[test]
fn a_range_split_off_is_read_at_a_timestamp_from_before_the_split() {
    use combkv_replica::ranges::read_timestamp;
    simulate("groups-split-past", |dir| async move {
        let (cl, all, g0) = forty_keys(dir).await;
        let first = read_timestamp().0;
        // The simulation's clock is paused; timestamps are the wall clock's.
        std::thread::sleep(Duration::from_millis(5));
        g0.settle_at(read_timestamp().0).await.unwrap();
        assert!(g0.store().get().read_version().get() > first);
        let host = cl.host(leader_of(&cl, &all, 0)).unwrap();
        assert_eq!(host.split(0, &kv(20)).await.unwrap(), 1);
        let read = |r: &combkv_replica::Replica, at: u64| {
            let mut found = Vec::new();
            let view = r.at(at)?;
            view.scan(&combkv::Range::all(), |it| {
                found.push((it.key.to_vec(), it.value.to_vec()));
                true
            })?;
            Ok::<_, combkv::Error>(found)
        };
        let want: Vec<(Vec<u8>, Vec<u8>)> = (20..40).map(|n| (kv(n), b"v".to_vec())).collect();
        // Every replica seeded by the split reads it; one started by a
        // message of the new group's leader first (and sent a snapshot)
        // holds no such past, and refuses.
        let mut answered = 0;
        for &id in &all {
            let r = wait_group(&cl, id, 1).await;
            r.settle_at(first).await.unwrap();
            match read(&r, first) {
                Ok(found) => {
                    assert_eq!(found, want, "node {id}: range 1 at the first timestamp");
                    answered += 1;
                }
                Err(combkv::Error::Unavailable(why)) if why == combkv_replica::PAST_GONE => {}
                Err(e) => panic!("node {id}: {e}"),
            }
        }
        assert!(
            answered > 0,
            "no replica of range 1 read at the first timestamp"
        );
        // A write inside the range after a read's timestamp, then a split
        // of it: the new range cannot read at that timestamp.
        let g1 = wait_leader(&cl, 1, &all).await;
        let before = read_timestamp().0;
        // The simulation's clock is paused; timestamps are the wall clock's.
        std::thread::sleep(Duration::from_millis(5));
        g1.write(g1.clock_ms(), put_op(&kv(35), b"w"))
            .await
            .unwrap();
        let host = cl.host(leader_of(&cl, &all, 1)).unwrap();
        let right = host.split(1, &kv(30)).await.unwrap();
        for &id in &all {
            let r = wait_group(&cl, id, right).await;
            r.settle_at(before).await.unwrap();
            match read(&r, before) {
                Err(combkv::Error::Unavailable(why)) if why == combkv_replica::PAST_GONE => {}
                other => panic!(
                    "node {id}: range {right} at a timestamp before a write in it: {other:?}"
                ),
            }
        }
    });
}
