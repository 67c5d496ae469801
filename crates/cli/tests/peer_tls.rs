//! The Raft port under attack: three `combkv serve` nodes (127.0.0.1, .2,
//! .3) with mutual TLS between them, and a stranger who reaches their Raft
//! ports.
//!
//! - `a_stranger_on_the_raft_port_changes_nothing`: well-formed Forward,
//!   Vote, Append and Snapshot frames (`combkv_replica::probe`) and a
//!   256 MiB length header, sent in plain TCP, over TLS with a certificate
//!   from another CA, and over TLS with a cluster certificate presented
//!   from an address it does not name: every connection is closed without
//!   an answer, no node's keys, term or log change, no node's memory
//!   grows, and each node counts what it refused. The cluster then still
//!   replicates a write.
//! - `a_raft_port_others_reach_needs_peer_tls`: a node whose Raft address
//!   is not loopback refuses to start without peer TLS (protected mode).

mod support;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::certs::{Ca, tls_client};

fn ip(id: u64) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, id as u8))
}

fn free_addr(id: u64) -> SocketAddr {
    SocketAddr::new(ip(id), support::free_port_on(ip(id)))
}

struct Node {
    resp: SocketAddr,
    raft: SocketAddr,
    child: Child,
    /// How it was started, for a restart.
    args: Vec<String>,
    log: PathBuf,
}

impl Node {
    fn spawn(args: &[String], log: &Path) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        Command::new(support::binary())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = Node::spawn(&self.args, &self.log);
    }

    fn sighup(&self) {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) with a pid of our own child and a valid signal.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    }
}

struct Cluster {
    nodes: Vec<Node>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            let _ = n.child.kill();
            let _ = n.child.wait();
        }
    }
}

impl Cluster {
    fn start(root: &Path, ca: &Ca) -> Cluster {
        let specs: Vec<(u64, SocketAddr, SocketAddr)> = (1..=3)
            .map(|id| (id, free_addr(id), free_addr(id)))
            .collect();
        let peers = specs
            .iter()
            .map(|(id, _, raft)| format!("{id}={raft}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut nodes = Vec::new();
        for &(id, resp, raft) in &specs {
            let (cert, key) = ca.leaf(&format!("node{id}"), ip(id));
            let dir = root.join(format!("n{id}"));
            let args: Vec<String> = [
                "serve",
                "--node-id",
                &id.to_string(),
                "--raft-addr",
                &raft.to_string(),
                "--peers",
                &peers,
                "--resp",
                &resp.to_string(),
                "--memcached",
                "off",
                "--data-dir",
                dir.to_str().unwrap(),
                "--peer-cert-file",
                cert.to_str().unwrap(),
                "--peer-key-file",
                key.to_str().unwrap(),
                "--peer-ca-cert-file",
                ca.ca_file().to_str().unwrap(),
            ]
            .map(String::from)
            .to_vec();
            let log = root.join(format!("n{id}.log"));
            let child = Node::spawn(&args, &log);
            nodes.push(Node {
                resp,
                raft,
                child,
                args,
                log,
            });
        }
        Cluster { nodes }
    }

    fn con(&self, i: usize) -> redis::Connection {
        let url = format!("redis://{}/", self.nodes[i].resp);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match redis::Client::open(url.as_str()).and_then(|c| c.get_connection()) {
                Ok(c) => return c,
                Err(e) if Instant::now() > deadline => panic!("node {i}: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Waits until every node knows a leader and has applied what the
    /// others committed.
    fn settled(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let infos: Vec<Info> = (0..3).map(|i| Info::of(&mut self.con(i))).collect();
            let applied: Vec<u64> = infos.iter().map(|i| i.num("raft_applied_index")).collect();
            let led = infos.iter().all(|i| !i.get("raft_leader_id").is_empty());
            let serving = infos.iter().all(|i| i.get("loading") == "0");
            if led && serving && applied.iter().all(|&a| a > 0 && a == applied[0]) {
                return;
            }
            assert!(Instant::now() < deadline, "the cluster did not settle");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

struct Info(String);

impl Info {
    fn of(con: &mut redis::Connection) -> Info {
        Info(redis::cmd("INFO").arg("everything").query(con).unwrap())
    }

    fn get(&self, field: &str) -> String {
        self.0
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .unwrap_or_else(|| panic!("INFO has no {field}"))
            .trim()
            .to_string()
    }

    fn num(&self, field: &str) -> u64 {
        self.get(field).parse().unwrap()
    }
}

/// What must not change on a node: its keys and values, its term and its
/// log.
#[derive(Debug, PartialEq, Eq)]
struct State {
    data: Vec<(String, String)>,
    term: u64,
    last_log_index: u64,
    commit_index: u64,
}

fn state(con: &mut redis::Connection) -> State {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    keys.sort();
    let data = keys
        .into_iter()
        .map(|k| {
            let v: String = redis::cmd("GET").arg(&k).query(con).unwrap();
            (k, v)
        })
        .collect();
    let info = Info::of(con);
    State {
        data,
        term: info.num("raft_term"),
        last_log_index: info.num("raft_last_log_index"),
        commit_index: info.num("raft_commit_index"),
    }
}

fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap()
        * 1024
}

/// Whether the node answered nothing but, at most, a TLS alert and closed
/// the connection (or reset it) within a few seconds.
fn closed_without_answer(s: &mut impl Read) -> bool {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            // A reset, or (over TLS) the alert that ends the handshake.
            Err(_) => break,
        }
        if Instant::now() > deadline {
            return false;
        }
    }
    // A plain stranger may read the TLS alert record (type 21) the node
    // sends when the handshake fails; never a response frame.
    got.is_empty() || got[0] == 21
}

/// A 256 MiB length header followed by as much data as the node takes.
const HUGE_HEADER: [u8; 4] = (256u32 << 20).to_le_bytes();

fn plain(addr: SocketAddr, payload: &[u8]) -> bool {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    // The node may close before all of it is written.
    let _ = s.write_all(payload);
    if payload.starts_with(&HUGE_HEADER) {
        let chunk = vec![0u8; 1 << 20];
        for _ in 0..8 {
            if s.write_all(&chunk).is_err() {
                break;
            }
        }
    }
    closed_without_answer(&mut s)
}

fn over_tls(addr: SocketAddr, config: &Arc<rustls::ClientConfig>, payload: &[u8]) -> bool {
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let conn = rustls::ClientConnection::new(Arc::clone(config), name).unwrap();
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, s);
    let _ = tls.write_all(payload);
    let _ = tls.flush();
    if payload.starts_with(&HUGE_HEADER) {
        let chunk = vec![0u8; 1 << 20];
        for _ in 0..8 {
            if tls.write_all(&chunk).is_err() {
                break;
            }
        }
    }
    closed_without_answer(&mut tls)
}

#[test]
fn a_stranger_on_the_raft_port_changes_nothing() {
    let root = std::env::temp_dir().join(format!("combkv-peer-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let ca = Ca::new(&root, "cluster-ca");
    let other = Ca::new(&root, "other-ca");
    let cluster = Cluster::start(&root, &ca);
    cluster.settled();
    let mut leader_con = cluster.con(0);
    for i in 0..50 {
        let _: () = redis::cmd("SET")
            .arg(format!("key:{i}"))
            .arg(format!("value {i}"))
            .query(&mut leader_con)
            .unwrap();
    }
    cluster.settled();

    let before: Vec<(State, u64, u64)> = (0..3)
        .map(|i| {
            let mut con = cluster.con(i);
            let refused = Info::of(&mut con).num("cluster_peers_refused");
            assert_eq!(Info::of(&mut con).get("cluster_peer_tls"), "1");
            (state(&mut con), refused, rss(cluster.nodes[i].child.id()))
        })
        .collect();

    // Node 1's frames: what node 1 would send, claiming a far higher term.
    let frames = combkv_replica::probe::frames(1, 1000, b"pwned", b"by a stranger");
    let (rogue_cert, rogue_key) = other.leaf("rogue", ip(1));
    let rogue = tls_client(&ca.ca_file(), &rogue_cert, &rogue_key);
    // A real cluster certificate, for node 2, presented from 127.0.0.1.
    let (stolen_cert, stolen_key) = ca.leaf("stolen", ip(2));
    let stolen = tls_client(&ca.ca_file(), &stolen_cert, &stolen_key);
    let mut huge = HUGE_HEADER.to_vec();
    huge.extend_from_slice(&[0u8; 1024]);
    for (i, node) in cluster.nodes.iter().enumerate() {
        for (name, frame) in frames.iter().map(|(n, f)| (*n, f)).chain([("huge", &huge)]) {
            assert!(plain(node.raft, frame), "node {i}: plain {name}");
            assert!(
                over_tls(node.raft, &rogue, frame),
                "node {i}: {name} with another CA's certificate"
            );
            if i != 0 {
                assert!(
                    over_tls(node.raft, &stolen, frame),
                    "node {i}: {name} with a certificate for another address"
                );
            }
        }
    }

    std::thread::sleep(Duration::from_millis(500));
    for (i, (was, refused_before, rss_before)) in before.iter().enumerate() {
        let mut con = cluster.con(i);
        let now = state(&mut con);
        assert_eq!(&now, was, "node {i} changed");
        let refused = Info::of(&mut con).num("cluster_peers_refused") - refused_before;
        let per_kind = frames.len() as u64 + 1;
        let want = if i == 0 { 2 * per_kind } else { 3 * per_kind };
        assert!(
            refused >= want,
            "node {i} counted {refused} refusals, want {want}"
        );
        let rss_now = rss(cluster.nodes[i].child.id());
        assert!(
            rss_now < rss_before + (32 << 20),
            "node {i} grew from {rss_before} to {rss_now} bytes"
        );
    }

    // The nodes still talk to each other.
    let _: () = redis::cmd("SET")
        .arg("after")
        .arg("the attack")
        .query(&mut leader_con)
        .unwrap();
    for i in 0..3 {
        let v: String = redis::cmd("GET")
            .arg("after")
            .query(&mut cluster.con(i))
            .unwrap();
        assert_eq!(v, "the attack", "node {i}");
    }
    drop(cluster);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_raft_port_others_reach_needs_peer_tls() {
    let dir = std::env::temp_dir().join(format!("combkv-raft-exposed-{}", std::process::id()));
    let run = |extra: &[&str]| {
        Command::new(support::binary())
            .args(["serve", "--node-id", "1", "--raft-addr", "10.255.0.1:7001"])
            .args(["--peers", "1=10.255.0.1:7001", "--memcached", "off"])
            .args(["--resp", &format!("127.0.0.1:{}", support::free_port())])
            .args(["--data-dir", dir.to_str().unwrap()])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("raft-addr") && err.contains("peer-cert-file"),
        "{err}"
    );
    // Turned off, the check lets it go on (to fail binding an address
    // this machine does not have) after a loud warning.
    let out = run(&["--protected-mode", "no"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("protected mode:"), "{err}");
    assert!(err.contains("UNPROTECTED"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Replaces `path`'s contents at once (a temporary file renamed over it),
/// as docs/security.md says to.
fn replace_file(path: &Path, from: &Path) {
    let tmp = path.with_extension("new");
    std::fs::copy(from, &tmp).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn set(con: &mut redis::Connection, k: &str, v: &str) {
    let _: () = redis::cmd("SET").arg(k).arg(v).query(con).unwrap();
}

/// Waits until `GET k` on every node gives `v`.
fn everywhere(cluster: &Cluster, k: &str, v: &str) {
    for i in 0..3 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got: Option<String> = redis::cmd("GET")
                .arg(k)
                .query(&mut cluster.con(i))
                .unwrap_or(None);
            if got.as_deref() == Some(v) {
                break;
            }
            assert!(Instant::now() < deadline, "node {i} has {got:?} for {k}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A CA rotation as docs/security.md gives it, every step by SIGHUP: both
/// CAs trusted, new certificates, the old CA dropped. Restarting a node
/// at the end makes the others open new connections to it: they can only
/// if they present certificates from the new CA, which they took from
/// SIGHUP. A certificate from the old CA is then refused.
#[test]
fn peer_certificates_rotate_with_sighup() {
    let root = std::env::temp_dir().join(format!("combkv-peer-rotate-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let old = Ca::new(&root, "old-ca");
    let new = Ca::new(&root, "new-ca");
    let mut cluster = Cluster::start(&root, &old);
    cluster.settled();
    let mut con = cluster.con(0);
    set(&mut con, "before", "1");
    everywhere(&cluster, "before", "1");

    let hup_all = |cluster: &Cluster| {
        for n in &cluster.nodes {
            n.sighup();
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    // 1. Both CAs in the file the nodes read (`old-ca.pem`).
    let both = root.join("both.pem");
    let text = std::fs::read_to_string(old.ca_file()).unwrap()
        + &std::fs::read_to_string(new.ca_file()).unwrap();
    std::fs::write(&both, text).unwrap();
    replace_file(&old.ca_file(), &both);
    hup_all(&cluster);
    // 2. Each node's certificate from the new CA.
    for id in 1..=3u64 {
        let (cert, key) = new.leaf(&format!("node{id}"), ip(id));
        replace_file(&root.join(format!("old-ca-node{id}.pem")), &cert);
        replace_file(&root.join(format!("old-ca-node{id}.key")), &key);
    }
    hup_all(&cluster);
    set(&mut cluster.con(1), "middle", "2");
    everywhere(&cluster, "middle", "2");
    // 3. The old CA out.
    replace_file(&old.ca_file(), &new.ca_file());
    hup_all(&cluster);

    cluster.nodes[2].restart();
    cluster.settled();
    set(&mut cluster.con(0), "after", "3");
    everywhere(&cluster, "after", "3");

    // A node certificate from the old CA is now a stranger's.
    let (cert, key) = old.leaf("stale", ip(1));
    let stale = tls_client(&new.ca_file(), &cert, &key);
    let frames = combkv_replica::probe::frames(1, 1000, b"stale", b"x");
    assert!(over_tls(cluster.nodes[1].raft, &stale, &frames[0].1));
    drop(cluster);
    let _ = std::fs::remove_dir_all(&root);
}

/// Opens an authenticated connection as `user` on node `i`, or the error.
fn auth_as(
    cluster: &Cluster,
    i: usize,
    user: &str,
    pass: &str,
) -> redis::RedisResult<redis::Connection> {
    let mut con = cluster.con(i);
    redis::cmd("AUTH")
        .arg(user)
        .arg(pass)
        .query::<()>(&mut con)?;
    Ok(con)
}

/// Users made or removed on any node are the same on every node (they
/// travel through the Raft log), after a node restarts too.
#[test]
fn acl_changes_reach_every_node() {
    let root = std::env::temp_dir().join(format!("combkv-cluster-acl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let ca = Ca::new(&root, "ca");
    let mut cluster = Cluster::start(&root, &ca);
    cluster.settled();
    // Made on node 2, whichever node leads.
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "app", "on", ">pw", "~app:*", "-@all", "+get", "+set",
        ])
        .query(&mut cluster.con(1))
        .unwrap();
    for i in 0..3 {
        // Each node puts the change in place as it applies the entry.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut con = loop {
            match auth_as(&cluster, i, "app", "pw") {
                Ok(con) => break con,
                Err(e) if Instant::now() > deadline => panic!("node {i}: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        let _: () = redis::cmd("SET")
            .arg(format!("app:{i}"))
            .arg("v")
            .query(&mut con)
            .unwrap();
        let err = redis::cmd("DEL")
            .arg("app:0")
            .query::<i64>(&mut con)
            .unwrap_err();
        assert_eq!(err.code(), Some("NOPERM"), "node {i}: {err}");
        let err = redis::cmd("GET")
            .arg("other")
            .query::<Option<String>>(&mut con)
            .unwrap_err();
        assert_eq!(err.code(), Some("NOPERM"), "node {i}: {err}");
    }
    // A restarted node has the users from its log.
    cluster.nodes[2].restart();
    cluster.settled();
    let deadline = Instant::now() + Duration::from_secs(10);
    while auth_as(&cluster, 2, "app", "pw").is_err() {
        assert!(Instant::now() < deadline, "the restarted node lost app");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Removed on node 3: gone everywhere.
    let n: i64 = redis::cmd("ACL")
        .arg(&["DELUSER", "app"])
        .query(&mut cluster.con(2))
        .unwrap();
    assert_eq!(n, 1);
    for i in 0..3 {
        let deadline = Instant::now() + Duration::from_secs(10);
        while auth_as(&cluster, i, "app", "pw").is_ok() {
            assert!(Instant::now() < deadline, "node {i} still knows app");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    drop(cluster);
    let _ = std::fs::remove_dir_all(&root);
}
