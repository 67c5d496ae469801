//! Writes routed by the range map from any node (`Host::propose_routed`),
//! simulated: batches whose ops lie in different ranges, sent through
//! nodes that hold none of some ranges, while ranges split and move over
//! a network that drops messages, with a partition and a crash of every
//! node.
//!
//! `COMBKV_SIM_SCHEDULES=N` runs N seeds of the seeded test (8 by
//! default); `COMBKV_SIM_SEED=S` the one seed S.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use combkv::op::{Arith, Cond, Number, OnMissing, Op, Outcome};
use combkv::{AtomicWrite, Error, Expiry};
use combkv_replica::network::sim::{Faults, SimNet};
use combkv_replica::{At, GroupId, Host, RemoteRead, Routed};
use groups::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::ops::Bound;

#[allow(dead_code)]
mod groups;

fn incr(key: &[u8]) -> Op<'_> {
    Op::Incr {
        key,
        arith: Arith::Signed(1),
        on_missing: OnMissing::Empty,
        cond: Cond::Any,
        expiry: Expiry::Never,
    }
}

/// A batch goes to each range's group and comes back in its order; a
/// write across ranges is refused before anything is proposed; a node
/// that holds no replica of a range forwards to one that does.
#[test]
fn a_batch_across_ranges_lands_in_order_and_a_cross_range_write_is_refused() {
    simulate("router-basic", |dir| async move {
        let cl = Cluster::new(dir.clone(), SimNet::new(1, Faults::NONE), NODES + 1, 0);
        for id in 1..=NODES + 1 {
            cl.start(id, &[0]).await;
        }
        cl.form(&[1, 2, 3, 4]).await;
        let host = |id: u64| cl.nodes.lock().get(&id).cloned().unwrap();
        let map = |id: u64| cl.replica(id, 0).unwrap().range_map().unwrap();
        wait_leader(&cl, 0, &[1, 2, 3, 4]).await;
        converge_on(&cl, 0, &[1, 2, 3, 4]).await.unwrap();
        // One range: a write of any keys is taken.
        let across = Op::Atomic(
            vec![
                AtomicWrite::Delete { key: b"a" },
                AtomicWrite::Delete { key: b"x" },
            ]
            .into(),
        );
        let stale = map(1);
        let mut one = Routed::default();
        one.push(&stale, &across).unwrap();
        assert_eq!(host(1).split(0, b"k").await.unwrap(), 1);
        wait_leader(&cl, 1, &[1, 2, 3, 4]).await;
        // Range 1 on nodes 2, 3 and 4 only: node 1 forwards to them.
        host(1)
            .set_replicas(1, vec![2, 3, 4], vec![])
            .await
            .unwrap();
        for _ in 0..600 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let l = wait_leader(&cl, 1, &[1, 2, 3, 4]).await;
            let mut m: Vec<u64> = l.status().nodes.iter().map(|n| n.0).collect();
            m.sort_unstable();
            if m == [2, 3, 4] && l.id() != 1 {
                break;
            }
        }
        let mut batch = Routed::default();
        let m = map(1);
        assert_eq!(
            batch.push(&m, &across),
            Err(Error::CrossRange),
            "two ranges' keys in one write"
        );
        assert!(batch.is_empty(), "a refused write adds nothing");
        for op in [
            put(b"a", b"1"),
            incr(b"n"),
            put(b"x", b"2"),
            incr(b"b"),
            put(b"y", b"3"),
        ] {
            batch.push(&m, &op).unwrap();
        }
        assert_eq!(batch.len(), 5);
        assert_eq!(batch.groups().collect::<Vec<GroupId>>(), vec![0, 1]);
        let (index, results) = host(1).propose_routed(1, batch).await;
        assert_eq!(index, None, "two groups' entries: no one index");
        let kinds: Vec<&str> = results
            .iter()
            .map(|r| match r {
                Ok(Outcome::Put { .. }) => "put",
                Ok(Outcome::Incr {
                    number: Number::Signed(1),
                    ..
                }) => "incr",
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(kinds, ["put", "incr", "put", "incr", "put"]);
        // Each key is in its range's group, and only there.
        let on = |g: GroupId| {
            if g == 0 {
                vec![1, 2, 3, 4]
            } else {
                vec![2, 3, 4]
            }
        };
        for (key, group) in [(&b"a"[..], 0), (b"b", 0), (b"n", 1), (b"x", 1), (b"y", 1)] {
            let l = wait_leader(&cl, group, &on(group)).await;
            assert!(l.current_store().get(key).unwrap().is_some(), "{key:?}");
            let other = wait_leader(&cl, 1 - group, &on(1 - group)).await;
            assert!(other.current_store().get(key).unwrap().is_none(), "{key:?}");
        }
        // Node 1 holds no replica of range 1: it reads it at one that does
        // (after that node's read index), and only what the range holds.
        let read = host(1)
            .read_remote(
                1,
                vec![
                    RemoteRead::Get(b"x".to_vec()),
                    RemoteRead::Count {
                        start: b"k".to_vec(),
                        end: None,
                    },
                    RemoteRead::Range {
                        start: Bound::Included(b"k".to_vec()),
                        end: Bound::Unbounded,
                        limit: Some(2),
                        reverse: true,
                    },
                ],
                At::Now,
            )
            .await
            .unwrap();
        assert_eq!(read[0].len(), 1);
        assert_eq!(read[0][0].value, b"2");
        assert_eq!(read[1][0].version, 3, "n, x and y");
        let keys: Vec<&[u8]> = read[2].iter().map(|it| &it.key[..]).collect();
        assert_eq!(keys, [&b"y"[..], b"x"]);
        let outside = host(1)
            .read_remote(1, vec![RemoteRead::Get(b"a".to_vec())], At::Now)
            .await;
        assert!(
            matches!(&outside, Err(e) if e.to_string().contains("range map has changed")),
            "{outside:?}"
        );
        // One group alone: the index of its entry comes back.
        let mut batch = Routed::default();
        batch.push(&m, &put(b"c", b"4")).unwrap();
        let (index, results) = host(3).propose_routed(1, batch).await;
        assert!(results[0].is_ok() && index.is_some_and(|i| i > 0));
        // Routed by the map from before the split, both keys go to range
        // 0, which refuses the one it no longer holds: that one is routed
        // again, by the map brought up to date, to range 1.
        let mut batch = Routed::default();
        for op in [put(b"d", b"5"), put(b"z", b"6")] {
            batch.push(&stale, &op).unwrap();
        }
        assert_eq!(batch.groups().collect::<Vec<GroupId>>(), vec![0]);
        let (_, results) = host(1).propose_routed(1, batch).await;
        assert!(
            results.iter().all(|r| matches!(r, Ok(Outcome::Put { .. }))),
            "{results:?}"
        );
        let l = wait_leader(&cl, 1, &[2, 3, 4]).await;
        assert_eq!(
            l.current_store().get(b"z").unwrap().as_deref(),
            Some(&b"6"[..])
        );
        for id in 1..=NODES + 1 {
            cl.stop(id).await;
        }
    });
}

/// Five nodes; range 0 splits twice and the middle range moves to nodes
/// 2, 4 and 5 while nine writers send batches through random nodes (node
/// 1 and 3 then hold no replica of it, and forward), over a network that
/// drops and delays messages, with a node cut off for a while and then
/// every node crashing at once. Each batch puts one key in each of the
/// three ranges-to-be and increments a counter: routed by a map that may
/// be out of date, refused ops are routed again, never applied twice (a
/// counter never exceeds the increments sent) and never lost (nor below
/// the increments acknowledged). At the end every key is in exactly one
/// group's stores, on every replica of it, and replicas are equal.
fn routed_under_faults(seed: u64) {
    const FIVE: u64 = 5;
    const WRITERS: usize = 9;
    /// At least; then until the run ends.
    const ROUNDS: usize = 25;
    let result = simulate(&format!("router-five-{seed}"), |dir| async move {
        let cl = Cluster::new(dir.clone(), SimNet::new(seed, FAULTY), FIVE, seed);
        cl.start_all(FIVE).await;
        let host = {
            let cl = Arc::clone(&cl);
            move |id: u64| -> Option<Host> { cl.nodes.lock().get(&id).cloned() }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (host, stop) = (host.clone(), Arc::clone(&stop));
                tokio::spawn(async move {
                    let mut rng = StdRng::seed_from_u64(seed * 1000 + w as u64);
                    // One key below "k", one in ["k", "t"), one above,
                    // and a counter in the middle.
                    let keys =
                        [format!("a{w}"), format!("m{w}"), format!("x{w}")].map(String::into_bytes);
                    let counter = format!("n{w}").into_bytes();
                    // Per key: (acknowledged, sent), values are rounds;
                    // the counter's are counts of increments.
                    let mut seen = [(0usize, 0usize); 4];
                    // Acknowledged writes of the middle range sent through
                    // a node the map names no replica of it on.
                    let mut forwarded = 0usize;
                    let mut n = 0;
                    while n < ROUNDS || !stop.load(Ordering::Relaxed) {
                        n += 1;
                        tokio::time::sleep(Duration::from_millis(rng.random_range(0..80))).await;
                        let via = rng.random_range(1..=FIVE);
                        let Some(h) = host(via) else { continue };
                        let Some(map) = h.group(0).and_then(|g| g.range_map()) else {
                            continue;
                        };
                        let value = n.to_string().into_bytes();
                        let mut batch = Routed::default();
                        for k in &keys {
                            batch.push(&map, &put(k, &value)).unwrap();
                        }
                        batch.push(&map, &incr(&counter)).unwrap();
                        for s in &mut seen[..3] {
                            s.1 = n;
                        }
                        seen[3].1 += 1;
                        let elsewhere = map.len() > 1 && !map.route(&keys[1]).voters.contains(&via);
                        let (_, results) = h.propose_routed(1, batch).await;
                        if elsewhere && matches!(results[1], Ok(Outcome::Put { .. })) {
                            forwarded += 1;
                        }
                        for (i, r) in results.iter().enumerate() {
                            match r {
                                Ok(Outcome::Put { .. }) if i < 3 => seen[i].0 = n,
                                Ok(Outcome::Incr {
                                    number: Number::Signed(v),
                                    ..
                                }) if i == 3 => {
                                    let v = *v as usize;
                                    assert!(
                                        v > seen[3].0 && v <= seen[3].1,
                                        "counter of writer {w} at {v}: acknowledged {}, sent {}",
                                        seen[3].0,
                                        seen[3].1
                                    );
                                    seen[3].0 = v;
                                }
                                Err(Error::Unavailable(_) | Error::Uncertain(_)) => {}
                                other => panic!("writer {w} op {i}: {other:?}"),
                            }
                        }
                    }
                    let mut out: Vec<groups::Outcome> = keys
                        .into_iter()
                        .zip(seen)
                        .map(|(k, (a, s))| (k, a, s))
                        .collect();
                    out.push((counter, seen[3].0, seen[3].1));
                    (out, forwarded)
                })
            })
            .collect();
        let mut rng = StdRng::seed_from_u64(seed ^ 0x7047e);
        split_move_crash(&cl, &mut rng, [b"k", b"t"]).await?;
        // The writers go on a while after the restart, then stop.
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop.store(true, Ordering::Relaxed);
        let (mut outcomes, mut forwarded) = (Vec::new(), 0);
        for w in writers {
            let (out, f) = w.await.map_err(|e| format!("a writer failed: {e}"))?;
            outcomes.extend(out);
            forwarded += f;
        }
        if forwarded == 0 {
            return Err("no write was forwarded to a range's nodes from another".into());
        }
        settle_after_move(&cl, &outcomes).await?;
        eprintln!("seed {seed}: {forwarded} writes forwarded");
        Ok(outcomes.iter().map(|o| o.1).sum::<usize>())
    });
    report(seed, result);
}

#[test]
fn writes_routed_from_any_node_under_splits_moves_and_faults_lose_nothing() {
    seeds(8).into_iter().for_each(routed_under_faults);
}
