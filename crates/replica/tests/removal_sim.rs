//! A node asks the voters of its membership, once a second, whether the
//! cluster still has it (a removal often never reaches the removed node).
//! A leader cut off from the majority stays leader in openraft 0.9 and
//! answers with the membership it committed, which a node added since, by
//! the majority's new leader, is not in: that stale answer must not make
//! the new node believe it was removed. A node really removed must still
//! find out.
//!
//! `COMBKV_SIM_SCHEDULES=N` runs N seeds (4 by default); `COMBKV_SIM_SEED=S`
//! the one seed S.

use std::time::Duration;

use combkv_replica::network::sim::{Faults, SimNet};
use groups::*;

#[allow(dead_code)]
mod groups;

/// Whether node `id`'s group 0 holds `member` in its membership.
fn holds(cl: &Cluster, id: u64, member: u64) -> bool {
    cl.replica(id, 0)
        .is_some_and(|r| r.status().nodes.iter().any(|(n, _, _)| *n == member))
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..600 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: not within 60 s");
}

fn run(seed: u64) {
    simulate(&format!("removal-{seed}"), |dir| async move {
        let net = SimNet::new(
            seed,
            Faults {
                drop_request: 0.0,
                drop_reply: 0.0,
                delay_ms: (0, 5),
            },
        );
        let cl = Cluster::new(dir, net, 5, seed);
        for id in 1..=4 {
            cl.start(id, &[0]).await;
        }
        // Node 1 leads: formed alone, 2 and 3 added by it.
        cl.form(&[1]).await;
        let first = wait_leader(&cl, 0, &[1]).await;
        for id in [2, 3] {
            add(&first, id).await;
        }
        // Cut off from 2 and 3, node 1 still leads (and answers) for itself;
        // 2 and 3 elect a leader of their own, which adds node 4. Node 4
        // asks the voters in id order: node 1, the stale leader, first.
        cl.net.cut(1, 2);
        cl.net.cut(1, 3);
        let second = wait_leader(&cl, 0, &[2, 3]).await;
        add(&second, 4).await;
        wait_for("node 4 holds its own membership", || holds(&cl, 4, 4)).await;
        assert!(first.is_leader(), "seed {seed}: node 1 no longer leads");
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let said = cl.replica(4, 0).unwrap().removed();
            assert!(said.is_none(), "seed {seed}: node 4 was told: {said:?}");
        }
        // The majority removes node 4: it finds out, though the removal
        // never reaches it (node 1's stale answer left aside, the cut
        // made whole so that the real leader answers).
        cl.net.uncut(1, 2);
        cl.net.uncut(1, 3);
        let leader = wait_leader(&cl, 0, &[2, 3]).await;
        leader.remove_node(4).await.unwrap();
        wait_for("node 4 finds out it was removed", || {
            cl.replica(4, 0).unwrap().removed().is_some()
        })
        .await;
    });
}

#[test]
fn a_stale_leaders_answer_does_not_remove_a_node_added_since() {
    for seed in seeds(4) {
        run(seed);
    }
}
