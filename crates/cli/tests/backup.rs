//! `combkv backup` and `combkv restore`, process level:
//!
//! - `a_backup_under_writes_restores_every_write_acknowledged_before_it`:
//!   three clients write (SET, overwrites, DEL) through the `redis` crate
//!   while `combkv backup` runs; the backup, restored into a new
//!   directory and served, holds every write acknowledged before the
//!   command started (writes during it may or may not be there), keys with
//!   a TTL keep their expiry to the millisecond, memcached client flags
//!   are kept; a server started on the backup directory itself serves the
//!   same, and so does a new node the backup was loaded into (`combkv
//!   load`). Restore refuses a non-empty directory and a directory that
//!   is no backup; BACKUP refuses a non-empty directory.
//! - `a_cluster_node_backup_restores_as_a_single_node_and_seeds_a_new_cluster`:
//!   a 3-node cluster takes writes through node 1; a backup taken through
//!   node 2 (a read barrier first) holds all of them, restores as a single
//!   node, and `combkv load` writes it into a new 3-node cluster, whose
//!   other nodes then serve every item, TTLs and flags included; a second
//!   load into the now non-empty cluster is refused.

mod support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::Server;

/// One write as its client saw it: key, value (None: DEL), and when it
/// was acknowledged (None: never, it was in flight at the end).
type Write1 = (String, Option<String>, Option<Instant>);

fn root(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("combkv-backup-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn combkv(args: &[&str]) -> Output {
    Command::new(support::binary())
        .args(args)
        .output()
        .expect("combkv runs")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}, stdout {}, stderr {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn connect(addr: SocketAddr) -> redis::Connection {
    redis::Client::open(format!("redis://{addr}/"))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap()
}

/// Client `t` writes `t<t>-<i>` keys until `stop`: SETs, an overwrite of
/// an earlier key of its own every 5th write, a DEL every 11th. Each key
/// has one writer, so its writes are ordered by the client's history.
fn writer(addr: SocketAddr, t: usize, stop: Arc<AtomicBool>) -> Vec<Write1> {
    let mut con = connect(addr);
    let mut history = Vec::new();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let key = match i % 5 {
            3 => format!("t{t}-{}", i / 2),
            _ => format!("t{t}-{i}"),
        };
        let del = i % 11 == 7;
        let value = (!del).then(|| format!("v{t}-{i}"));
        let r = match &value {
            Some(v) => redis::cmd("SET").arg(&key).arg(v).query::<()>(&mut con),
            None => redis::cmd("DEL")
                .arg(&key)
                .query::<i64>(&mut con)
                .map(|_| ()),
        };
        let acked = r.is_ok().then(Instant::now);
        history.push((key, value, acked));
        if r.is_err() {
            break;
        }
        i += 1;
    }
    history
}

/// Every key's state as of `t0` must be what the server has, unless a
/// write to it was sent later (then that write's state may be there).
fn assert_backup_holds(histories: &[Vec<Write1>], t0: Instant, con: &mut redis::Connection) {
    let mut allowed: BTreeMap<&str, (Option<&str>, Vec<Option<&str>>)> = BTreeMap::new();
    for h in histories {
        for (key, value, acked) in h {
            let e = allowed.entry(key).or_default();
            match acked {
                Some(at) if *at < t0 => {
                    e.0 = value.as_deref();
                    e.1.clear();
                }
                _ => e.1.push(value.as_deref()),
            }
        }
    }
    let mut exact = 0;
    for (key, (before, later)) in &allowed {
        let got: Option<String> = redis::cmd("GET").arg(key).query(con).unwrap();
        let got = got.as_deref();
        assert!(
            got == *before || later.contains(&got),
            "{key}: {got:?}, acknowledged before the backup as {before:?}, later {later:?}"
        );
        exact += later.is_empty() as usize;
    }
    assert!(exact > 100, "most keys were not written again ({exact})");
}

/// A memcached request on a new connection; the answer up to `until`.
fn memcached(addr: SocketAddr, req: &str, until: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(req.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while !String::from_utf8_lossy(&got).contains(until) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// Keys with a TTL, one expiring at once, a memcached item with flags;
/// returns the TTL keys' PEXPIRETIME.
fn write_ttls_and_flags(server: &Server) -> Vec<(String, i64)> {
    let mut con = connect(server.resp);
    let mut out = Vec::new();
    for i in 0..20 {
        let key = format!("ttl-{i}");
        redis::cmd("SET")
            .arg(&key)
            .arg("t")
            .arg("PX")
            .arg(3_600_000 + i * 1000)
            .query::<()>(&mut con)
            .unwrap();
        let at: i64 = redis::cmd("PEXPIRETIME").arg(&key).query(&mut con).unwrap();
        out.push((key, at));
    }
    redis::cmd("SET")
        .arg("gone")
        .arg("g")
        .arg("PX")
        .arg(1)
        .query::<()>(&mut con)
        .unwrap();
    let stored = memcached(server.memcached, "set mc 4242 0 5\r\nhello\r\n", "\r\n");
    assert_eq!(stored, "STORED\r\n");
    out
}

fn assert_ttls_and_flags(server: &Server, ttls: &[(String, i64)]) {
    let mut con = connect(server.resp);
    for (key, at) in ttls {
        let got: i64 = redis::cmd("PEXPIRETIME").arg(key).query(&mut con).unwrap();
        assert_eq!(got, *at, "{key}'s expiry");
    }
    let gone: Option<String> = redis::cmd("GET").arg("gone").query(&mut con).unwrap();
    assert_eq!(gone, None);
    let got = memcached(server.memcached, "get mc\r\n", "END\r\n");
    assert_eq!(got, "VALUE mc 4242 5\r\nhello\r\nEND\r\n");
}

#[test]
fn a_backup_under_writes_restores_every_write_acknowledged_before_it() {
    let root = root("single");
    let data = root.join("data");
    let server = Server::start(&["--data-dir", data.to_str().unwrap()], None);
    let ttls = write_ttls_and_flags(&server);
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|t| {
            let stop = stop.clone();
            let addr = server.resp;
            std::thread::spawn(move || writer(addr, t, stop))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    let backup = root.join("backup");
    let addr = server.resp.to_string();
    let t0 = Instant::now();
    let out = combkv(&[
        "backup",
        "--server",
        &addr,
        "--to",
        backup.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let histories: Vec<Vec<Write1>> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    let after = histories
        .iter()
        .flatten()
        .filter(|w| w.2.is_some_and(|a| a > t0));
    assert!(
        after.count() > 0,
        "writes went on during and after the backup"
    );

    // A second backup into the same directory is refused, with the reason.
    let out = combkv(&[
        "backup",
        "--server",
        &addr,
        "--to",
        backup.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("not empty"), "{}", text(&out));

    // Restore, then serve the restored directory.
    let restored = root.join("restored");
    let (from, to) = (backup.to_str().unwrap(), restored.to_str().unwrap());
    let out = combkv(&["restore", "--from", from, "--data-dir", to]);
    assert!(out.status.success(), "{}", text(&out));
    let out = combkv(&["restore", "--from", from, "--data-dir", to]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let empty = root.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = combkv(&[
        "restore",
        "--from",
        empty.to_str().unwrap(),
        "--data-dir",
        to,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    // A live data directory is no backup: a copy of its checkpoint would
    // lose its log.
    let out = combkv(&[
        "restore",
        "--from",
        data.to_str().unwrap(),
        "--data-dir",
        to,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    drop(server);

    let server = Server::start(&["--data-dir", to], None);
    assert_backup_holds(&histories, t0, &mut connect(server.resp));
    assert_ttls_and_flags(&server, &ttls);
    drop(server);
    // Loaded into a new single node through its write path.
    let fresh = root.join("fresh");
    let server = Server::start(&["--data-dir", fresh.to_str().unwrap()], None);
    let at = server.resp.to_string();
    let out = combkv(&["load", "--server", &at, "--from", empty.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("holds no checkpoint"), "{}", text(&out));
    let out = combkv(&["load", "--server", &at, "--from", from]);
    assert!(out.status.success(), "{}", text(&out));
    assert_backup_holds(&histories, t0, &mut connect(server.resp));
    assert_ttls_and_flags(&server, &ttls);
    drop(server);
    // The backup directory is a data directory by itself.
    let server = Server::start(&["--data-dir", from], None);
    assert_backup_holds(&histories, t0, &mut connect(server.resp));
    assert_ttls_and_flags(&server, &ttls);
    drop(server);
    std::fs::remove_dir_all(&root).unwrap();
}

/// Three cluster nodes on 127.0.0.1, killed on drop.
struct Nodes(Vec<Child>);

impl Drop for Nodes {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Three nodes; their (RESP, memcached) addresses.
fn start_cluster(root: &Path) -> (Nodes, Vec<(SocketAddr, SocketAddr)>) {
    let port = || support::free_port();
    let nodes: Vec<(SocketAddr, SocketAddr, SocketAddr)> = (0..3)
        .map(|_| {
            let a = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
            (a(port()), a(port()), a(port()))
        })
        .collect();
    let peers = (1..=3)
        .map(|id| format!("{id}={}", nodes[id - 1].2))
        .collect::<Vec<_>>()
        .join(",");
    let children = (1..=3)
        .map(|id| {
            let (resp, mc, raft) = nodes[id - 1];
            let dir = root.join(format!("n{id}"));
            Command::new(support::binary())
                .args(["serve", "--node-id", &id.to_string()])
                .args(["--raft-addr", &raft.to_string(), "--peers", &peers])
                .args(["--resp", &resp.to_string(), "--memcached", &mc.to_string()])
                .args(["--data-dir", dir.to_str().unwrap(), "--log-level", "warn"])
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("combkv starts")
        })
        .collect();
    (Nodes(children), nodes.iter().map(|n| (n.0, n.1)).collect())
}

/// Waits until every node of `addrs` has caught up with its cluster: a
/// node that has not answers LOADING (PING included), as Redis does while
/// it loads, and the test asks each of them.
fn all_ready(addrs: &[(SocketAddr, SocketAddr)]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for (resp, _) in addrs {
        while !support::ask(*resp, b"PING\r\n", b"+PONG\r\n", Duration::from_millis(500)) {
            assert!(Instant::now() < deadline, "{resp} never caught up");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A connection to node `addr` once its cluster takes a write.
fn first_write(addr: SocketAddr) -> redis::Connection {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let c = redis::Client::open(format!("redis://{addr}/")).unwrap();
        if let Ok(mut con) = c.get_connection_with_timeout(Duration::from_secs(1))
            && redis::cmd("SET")
                .arg("first")
                .arg("1")
                .query::<()>(&mut con)
                .is_ok()
        {
            return con;
        }
        assert!(Instant::now() < deadline, "the cluster takes no write");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Every expected item on the node at (`resp`, `mc`), with its TTL and
/// the memcached item's flags.
fn assert_cluster_data(resp: SocketAddr, mc: SocketAddr, expected: &BTreeMap<String, String>) {
    let mut con = connect(resp);
    let n: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(n, expected.len() as i64 + 1);
    for (k, v) in expected {
        let got: Option<String> = redis::cmd("GET").arg(k).query(&mut con).unwrap();
        assert_eq!(got.as_ref(), Some(v), "{k}");
    }
    let ttl: i64 = redis::cmd("TTL").arg("key-0").query(&mut con).unwrap();
    assert!((3500..=3600).contains(&ttl), "key-0's TTL {ttl}");
    let ttl: i64 = redis::cmd("TTL").arg("key-1").query(&mut con).unwrap();
    assert_eq!(ttl, -1);
    let got = memcached(mc, "get mc\r\n", "END\r\n");
    assert_eq!(got, "VALUE mc 77 2\r\nhi\r\nEND\r\n");
}

#[test]
fn a_cluster_node_backup_restores_as_a_single_node_and_seeds_a_new_cluster() {
    let root = root("cluster");
    let (nodes, addrs) = start_cluster(&root.join("old"));
    let mut con = first_write(addrs[0].0);
    all_ready(&addrs);
    let mut expected = BTreeMap::new();
    expected.insert("first".to_string(), "1".to_string());
    for i in 0..300 {
        let (k, v) = (format!("key-{i}"), format!("value-{i}"));
        let mut set = redis::cmd("SET");
        set.arg(&k).arg(&v);
        if i % 3 == 0 {
            set.arg("EX").arg(3600);
        }
        set.query::<()>(&mut con).unwrap();
        expected.insert(k, v);
    }
    let stored = memcached(addrs[0].1, "set mc 77 0 2\r\nhi\r\n", "\r\n");
    assert_eq!(stored, "STORED\r\n");
    // Through node 2: its read barrier makes it wait for every write the
    // cluster acknowledged.
    let backup = root.join("backup");
    let via = addrs[1].0.to_string();
    let out = combkv(&["backup", "--server", &via, "--to", backup.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    drop(nodes);

    // As a single node.
    let restored = root.join("restored");
    let to = restored.to_str().unwrap();
    let out = combkv(&[
        "restore",
        "--from",
        backup.to_str().unwrap(),
        "--data-dir",
        to,
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let server = Server::start(&["--data-dir", to], None);
    assert_cluster_data(server.resp, server.memcached, &expected);
    drop(server);

    // Into a new cluster, through node 1; node 3 serves it all.
    let (nodes, addrs) = start_cluster(&root.join("new"));
    let mut con = first_write(addrs[0].0);
    all_ready(&addrs);
    redis::cmd("DEL")
        .arg("first")
        .query::<i64>(&mut con)
        .unwrap();
    let from = backup.to_str().unwrap();
    let out = combkv(&["load", "--server", &addrs[0].0.to_string(), "--from", from]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("loaded 302 items"), "{}", text(&out));
    assert_cluster_data(addrs[2].0, addrs[2].1, &expected);
    let out = combkv(&["load", "--server", &addrs[1].0.to_string(), "--from", from]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("not empty"), "{}", text(&out));
    drop(nodes);
    std::fs::remove_dir_all(&root).unwrap();
}
