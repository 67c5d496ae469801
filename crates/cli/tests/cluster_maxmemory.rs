//! `maxmemory` on a cluster node holds where the data lands: a range's
//! leader above its limit refuses the writes that would add data, whichever
//! node they came in at (a node below its own limit forwards them to it),
//! and lets deletes through, as Redis refuses its `denyoom` commands. Before,
//! only the node a client wrote to checked its own memory, so writes that
//! came in elsewhere grew a full leader without bound, and a full node
//! refused writes that would only grow others. A node's own limit now
//! refuses only what it leads, as a Redis replica leaves the limit to its
//! master.

mod support;

use std::time::{Duration, Instant};

use support::node::{Node, find_leader, peers};
use support::resp::{Client, Value};

const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// Sends `args` until the reply satisfies `done` (the node samples its
/// memory every 100 ms), for at most 10 s; the last reply.
fn until(c: &mut Client, args: &[&str], done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = c.cmd(args);
        if done(&v) || Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn is_ok(v: &Value) -> bool {
    matches!(v, Value::Simple(s) if s == "OK")
}

fn is_oom(v: &Value) -> bool {
    matches!(v, Value::Error(e) if e == OOM)
}

#[test]
fn a_leader_above_maxmemory_refuses_writes_that_come_in_at_another_node() {
    let root = support::node::root("cluster_maxmemory", "leader");
    let mut nodes: Vec<Node> = (1..=3).map(|id| Node::new(&root, id)).collect();
    let list = peers(&nodes.iter().collect::<Vec<_>>());
    for n in &mut nodes {
        n.start(&list);
    }
    let leader = find_leader(&nodes);
    let follower = nodes.iter().find(|n| n.id != leader.id).unwrap();
    let mut at_leader = Client::connect(leader.resp);
    let mut at_follower = Client::connect(follower.resp);
    let v = until(&mut at_follower, &["SET", "k0", "v"], is_ok);
    assert!(is_ok(&v), "the cluster takes writes: {v:?}");
    for k in ["k1", "k2", "k3"] {
        assert!(is_ok(&at_follower.cmd(&["SET", k, "v"])));
    }

    // The leader's limit is below what it holds; the follower has none.
    assert!(is_ok(&at_leader.cmd(&["CONFIG", "SET", "maxmemory", "1"])));
    // (Until the leader samples its memory, the probe is taken.)
    let v = until(&mut at_follower, &["SET", "probe", "v"], is_oom);
    assert!(is_oom(&v), "a SET through the follower: {v:?}");
    let v = at_follower.cmd(&["SET", "new", "v"]);
    assert!(is_oom(&v), "a SET through the follower: {v:?}");
    let limit = at_follower.cmd(&["CONFIG", "GET", "maxmemory"]);
    assert_eq!(
        limit,
        Value::Array(vec![
            Value::Bulk(b"maxmemory".to_vec()),
            Value::Bulk(b"0".to_vec())
        ]),
        "the follower has no limit of its own"
    );
    // Every write that can add data is refused, and changes nothing.
    for args in [
        &["SET", "k1", "longer value"][..],
        &["APPEND", "k1", "more"],
        &["INCR", "counter"],
        &["SETRANGE", "k2", "0", "x"],
        &["MSET", "k1", "a", "k9", "b"],
        &["COPY", "k1", "k1copy"],
    ] {
        let v = at_follower.cmd(args);
        assert!(is_oom(&v), "{args:?} through the follower: {v:?}");
    }
    // Counted where the client was answered: 8 writes so far (the probe,
    // `new`, six commands), none refused by the follower itself.
    let info = at_follower.cmd(&["INFO", "stats"]).text().unwrap();
    let refused: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("oom_rejected_writes:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap();
    assert!(refused >= 8, "oom_rejected_writes {refused}");
    assert_eq!(at_leader.cmd(&["GET", "new"]), Value::NilBulk);
    assert_eq!(at_leader.cmd(&["GET", "k1"]), Value::Bulk(b"v".to_vec()));
    assert_eq!(
        at_leader.cmd(&["EXISTS", "counter", "k9", "k1copy"]),
        Value::Int(0)
    );
    // A transaction with one is refused whole: its DEL is not applied.
    assert!(is_ok(&at_follower.cmd(&["MULTI"])));
    at_follower.cmd(&["DEL", "k3"]);
    at_follower.cmd(&["SET", "k4", "v"]);
    let v = at_follower.cmd(&["EXEC"]);
    assert!(is_oom(&v), "EXEC of DEL and SET: {v:?}");
    assert_eq!(at_leader.cmd(&["EXISTS", "k3", "k4"]), Value::Int(1));
    // Writes that add nothing go through.
    assert_eq!(at_follower.cmd(&["DEL", "k2"]), Value::Int(1));
    assert_eq!(at_follower.cmd(&["EXPIRE", "k3", "1000"]), Value::Int(1));
    assert_eq!(
        at_follower.cmd(&["RENAME", "k3", "k5"]),
        Value::Simple("OK".into())
    );
    assert_eq!(at_leader.cmd(&["EXISTS", "k2", "k3", "k5"]), Value::Int(1));

    // Room again: the follower's writes are taken.
    assert!(is_ok(&at_leader.cmd(&["CONFIG", "SET", "maxmemory", "0"])));
    let v = until(&mut at_follower, &["SET", "new", "v"], is_ok);
    assert!(
        is_ok(&v),
        "a SET through the follower once the leader has room: {v:?}"
    );
    assert_eq!(at_leader.cmd(&["GET", "new"]), Value::Bulk(b"v".to_vec()));

    // A node's own limit refuses nothing it does not lead: the follower,
    // above its limit, takes writes its leader (with room) applies, as a
    // Redis replica leaves the limit to its master.
    let v = at_follower.cmd(&["CONFIG", "SET", "maxmemory", "1"]);
    assert!(is_ok(&v), "{v:?}");
    std::thread::sleep(Duration::from_millis(300));
    for i in 0..10 {
        let k = format!("f{i}");
        let v = at_follower.cmd(&["SET", &k, "v"]);
        assert!(
            is_ok(&v),
            "SET {k} through a follower above its own limit: {v:?}"
        );
    }
    assert_eq!(at_leader.cmd(&["EXISTS", "f0", "f9"]), Value::Int(2));
    // The leader's limit holds for its own clients as for the others'.
    assert!(is_ok(&at_leader.cmd(&["CONFIG", "SET", "maxmemory", "1"])));
    let v = until(&mut at_leader, &["SET", "probe2", "v"], is_oom);
    assert!(is_oom(&v), "a SET at the leader above its limit: {v:?}");
    let v = at_leader.cmd(&["SET", "own", "v"]);
    assert!(is_oom(&v), "a SET at the leader above its limit: {v:?}");
    assert_eq!(at_follower.cmd(&["GET", "own"]), Value::NilBulk);
}
