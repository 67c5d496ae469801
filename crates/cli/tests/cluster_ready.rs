//! A cluster node restarted behind its leader is not ready, and serves no
//! read, until it has applied what the leader had committed: with
//! `cluster-reads local` (reads from the node's own store) a restarted
//! follower would otherwise answer from the state it stopped at.

mod support;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::resp::{Client, Value};

struct Node {
    resp: SocketAddr,
    metrics: SocketAddr,
    raft: SocketAddr,
    dir: PathBuf,
    child: Option<Child>,
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn ip(id: u64) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, id as u8))
}

fn addr(id: u64) -> SocketAddr {
    SocketAddr::new(ip(id), support::free_port_on(ip(id)))
}

impl Node {
    fn start(&mut self, id: u64, peers: &str) {
        let child = Command::new(support::binary())
            .args(["serve", "--node-id", &id.to_string()])
            .args(["--raft-addr", &self.raft.to_string(), "--peers", peers])
            .args(["--resp", &self.resp.to_string(), "--memcached", "off"])
            .args(["--metrics", &self.metrics.to_string()])
            .args(["--data-dir", self.dir.to_str().unwrap()])
            .args(["--cluster-reads", "local", "--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("combkv starts");
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    fn readyz(&self) -> Option<(u16, String)> {
        let mut s = TcpStream::connect_timeout(&self.metrics, Duration::from_millis(500)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(b"GET /readyz HTTP/1.1\r\n\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let status = text.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, text.split_once("\r\n\r\n")?.1.trim().to_string()))
    }

    fn role(&self) -> Option<String> {
        let mut c = Client::connect(self.resp);
        let info = c.cmd(&["INFO", "replication"]).text()?;
        info.lines()
            .find_map(|l| l.strip_prefix("raft_role:"))
            .map(|r| r.trim().to_string())
    }
}

fn wait_ready(nodes: &[Node], within: Duration) {
    let deadline = Instant::now() + within;
    for n in nodes {
        while n.readyz().map(|r| r.0) != Some(200) {
            assert!(
                Instant::now() < deadline,
                "{} not ready: {:?}",
                n.resp,
                n.readyz()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn temp_root() -> PathBuf {
    let d = std::env::temp_dir().join(format!("combkv-cluster-ready-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn node(root: &Path, id: u64) -> Node {
    Node {
        resp: addr(id),
        metrics: addr(id),
        raft: addr(id),
        dir: root.join(format!("n{id}")),
        child: None,
    }
}

#[test]
fn a_node_restarted_behind_its_leader_is_not_ready_until_caught_up() {
    const KEYS: u64 = 30_000;
    let root = temp_root();
    let mut nodes: Vec<Node> = (1..=3).map(|id| node(&root, id)).collect();
    let peers = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{}={}", i + 1, n.raft))
        .collect::<Vec<_>>()
        .join(",");
    for (i, n) in nodes.iter_mut().enumerate() {
        n.start(i as u64 + 1, &peers);
    }
    wait_ready(&nodes, Duration::from_secs(60));
    let leader = (0..3)
        .find(|&i| nodes[i].role().as_deref() == Some("leader"))
        .expect("a leader");
    let behind = (leader + 1) % 3;
    nodes[behind].kill();

    let mut c = Client::connect(nodes[leader].resp);
    for batch in 0..KEYS / 1000 {
        let mut args = vec!["MSET".to_string()];
        for i in batch * 1000..(batch + 1) * 1000 {
            args.push(format!("k{i}"));
            args.push(format!("v{i}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(c.cmd(&args), Value::Simple("OK".into()));
    }
    let last = format!("k{}", KEYS - 1);

    nodes[behind].start(behind as u64 + 1, &peers);
    let (mut not_ready, mut loading) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "never caught up");
        let probe = nodes[behind].readyz();
        if let Some((200, _)) = probe {
            break;
        }
        if let Some((status, body)) = probe {
            assert_eq!(status, 503, "{body}");
            not_ready += 1;
        }
        if TcpStream::connect(nodes[behind].resp).is_ok() {
            let mut r = Client::connect(nodes[behind].resp);
            match r.cmd(&["GET", &last]) {
                Value::Error(e) if e.starts_with("LOADING") => loading += 1,
                Value::Bulk(v) => assert_eq!(v, format!("v{}", KEYS - 1).as_bytes()),
                other => panic!("a restarted node served {other} for {last}"),
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    eprintln!("before caught up: {not_ready} readyz 503s, {loading} LOADING replies");
    assert!(
        not_ready + loading > 0,
        "the restarted node was never seen catching up"
    );
    // Ready: its own store has everything the leader had committed.
    let mut r = Client::connect(nodes[behind].resp);
    for i in (0..KEYS).step_by(101).chain([KEYS - 1]) {
        assert_eq!(
            r.cmd(&["GET", &format!("k{i}")]).text(),
            Some(format!("v{i}")),
            "k{i} on the restarted node once ready"
        );
    }
    drop(nodes);
    let _ = std::fs::remove_dir_all(&root);
}
