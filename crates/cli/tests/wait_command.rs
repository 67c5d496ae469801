//! WAIT: on a single node, Redis's answers with no replica (0) and its
//! argument errors, compared with a redis-server; on a three-node cluster,
//! the followers that hold a connection's writes, waited for without
//! holding the event loop: every follower once the write has reached
//! them, and with one killed, the one left after about the timeout.

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::resp::{Beside, Client, Value};

#[test]
fn single_node_answers_and_errors_match_redis() {
    // The servers are bound too: they stop when the test ends.
    let Some(Beside {
        redis: _redis,
        combkv: _combkv,
        mut r,
        mut c,
    }) = Beside::start()
    else {
        return;
    };
    let steps: &[&[&str]] = &[
        &["WAIT", "0", "0"],
        &["SET", "k", "v"],
        &["WAIT", "0", "0"],
        &["WAIT", "-1", "0"],
        &["WAIT", "x", "0"],
        &["WAIT", "1.5", "0"],
        &["WAIT", "0", "x"],
        &["WAIT", "0", "1.5"],
        &["WAIT", "0", "-1"],
        &["WAIT", "-1", "-1"],
        &["WAIT", "x", "-1"],
        &["WAIT", "0"],
        &["WAIT", "0", "0", "0"],
        // Redis waits the 50 ms for a replica it does not have; combkv,
        // which can have none, answers at once. Both answer 0.
        &["WAIT", "1", "50"],
        &["MULTI"],
        &["WAIT", "1", "0"],
        &["EXEC"],
    ];
    for step in steps {
        assert_eq!(c.cmd(step), r.cmd(step), "{step:?}");
    }
}

struct Node {
    resp: SocketAddr,
    raft: SocketAddr,
    dir: PathBuf,
    child: Option<Child>,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

fn addr(id: u64) -> SocketAddr {
    let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, id as u8));
    SocketAddr::new(ip, support::free_port_on(ip))
}

impl Node {
    fn new(root: &Path, id: u64) -> Node {
        Node {
            resp: addr(id),
            raft: addr(id),
            dir: root.join(format!("n{id}")),
            child: None,
        }
    }

    /// One event loop, so that a parked WAIT and a PING share it.
    fn start(&mut self, id: u64, peers: &str) {
        let child = Command::new(support::binary())
            .args(["serve", "--node-id", &id.to_string()])
            .args(["--raft-addr", &self.raft.to_string(), "--peers", peers])
            .args(["--resp", &self.resp.to_string(), "--memcached", "off"])
            .args(["--data-dir", self.dir.to_str().unwrap()])
            .args(["--threads", "1", "--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("combkv starts");
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn role(&self) -> Option<String> {
        if std::net::TcpStream::connect(self.resp).is_err() {
            return None;
        }
        let mut c = Client::connect(self.resp);
        // Not LOADING any more.
        if c.cmd(&["PING"]) != Value::Simple("PONG".into()) {
            return None;
        }
        let info = c.cmd(&["INFO", "replication"]).text()?;
        info.lines()
            .find_map(|l| l.strip_prefix("raft_role:"))
            .map(|r| r.trim().to_string())
    }
}

/// The index of the node that leads, once one does and every node serves.
fn leader(nodes: &[Node], within: Duration) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let roles: Vec<Option<String>> = nodes.iter().map(Node::role).collect();
        let serving = roles.iter().all(|r| r.is_some());
        if let Some(i) = roles.iter().position(|r| r.as_deref() == Some("leader"))
            && serving
        {
            return i;
        }
        assert!(Instant::now() < deadline, "no leader: {roles:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_cluster_leader_counts_the_followers_that_hold_the_writes() {
    let root = std::env::temp_dir().join(format!("combkv-wait-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mut nodes: Vec<Node> = (1..=3).map(|id| Node::new(&root, id)).collect();
    let peers = (1..=3)
        .map(|id| format!("{id}={}", nodes[id - 1].raft))
        .collect::<Vec<_>>()
        .join(",");
    for (i, n) in nodes.iter_mut().enumerate() {
        n.start(i as u64 + 1, &peers);
    }
    let l = leader(&nodes, Duration::from_secs(60));
    let mut c = Client::connect(nodes[l].resp);
    assert_eq!(c.cmd(&["SET", "k", "1"]), Value::Simple("OK".into()));
    // Both followers get the write: it committed on one of them at least,
    // and the other is sent it at once.
    assert_eq!(c.cmd(&["WAIT", "2", "0"]), Value::Int(2));
    assert_eq!(c.cmd(&["WAIT", "0", "0"]), Value::Int(2));
    // A connection that wrote nothing waits for the commit index.
    let mut other = Client::connect(nodes[l].resp);
    assert_eq!(other.cmd(&["WAIT", "2", "5000"]), Value::Int(2));
    // A follower does not know what the others hold.
    let f = (l + 1) % 3;
    let mut on_follower = Client::connect(nodes[f].resp);
    match on_follower.cmd(&["WAIT", "1", "0"]) {
        Value::Error(e) => assert!(e.starts_with("ERR WAIT cannot be used with replica"), "{e}"),
        v => panic!("WAIT on a follower: {v}"),
    }

    // Durability is the Raft log's on a cluster node, set at start.
    match c.cmd(&["CONFIG", "SET", "durability", "everysec"]) {
        Value::Error(e) => assert!(e.contains("not changeable on a cluster node"), "{e}"),
        v => panic!("CONFIG SET durability on a cluster node: {v}"),
    }
    nodes[f].kill();
    assert_eq!(c.cmd(&["SET", "k", "2"]), Value::Simple("OK".into()));
    assert_eq!(c.cmd(&["WAIT", "1", "0"]), Value::Int(1));
    let started = Instant::now();
    c.send(&["WAIT", "2", "500"]);
    // The parked WAIT holds neither the event loop nor the other clients.
    assert_eq!(other.cmd(&["PING"]), Value::Simple("PONG".into()));
    assert!(started.elapsed() < Duration::from_millis(400));
    assert_eq!(c.reply(Duration::from_secs(5)), Value::Int(1));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(3),
        "WAIT 2 500 took {took:?}"
    );
    // The connection goes on, and a pipeline after a parked WAIT too.
    c.send(&["WAIT", "2", "200"]);
    c.send(&["GET", "k"]);
    assert_eq!(c.reply(Duration::from_secs(5)), Value::Int(1));
    assert_eq!(c.reply(Duration::from_secs(5)), Value::Bulk(b"2".to_vec()));
    // Once the follower is back, it catches up and counts again: a write
    // and a WAIT sent together, the WAIT for the write's own entry.
    nodes[f].start(f as u64 + 1, &peers);
    c.send(&["SET", "k", "3"]);
    c.send(&["WAIT", "2", "30000"]);
    assert_eq!(c.reply(Duration::from_secs(5)), Value::Simple("OK".into()));
    assert_eq!(c.reply(Duration::from_secs(35)), Value::Int(2));
    // A WAIT that parked is counted once, when it answers.
    let stats = c.cmd(&["INFO", "commandstats"]).text().unwrap();
    let waits = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_wait:calls="))
        .and_then(|l| l.split(',').next())
        .unwrap_or_else(|| panic!("no WAIT in {stats}"));
    assert_eq!(waits, "7", "{stats}");
    drop(nodes);
    let _ = std::fs::remove_dir_all(&root);
}
