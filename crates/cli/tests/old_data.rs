//! Data directories written by combkv 0.1 (before the server and replica
//! redesign of issue 36) open with this binary and serve what the old one
//! served, exactly.
//!
//! The fixtures under `tests/fixtures` were made by `make-fixtures.sh`
//! with the release binary of the last commit before that redesign (see
//! the README there); each comes with a `.keys` file of what the old
//! server held just before it was killed with SIGKILL. Never regenerate
//! them with a newer binary: their point is that they are old.
//!
//! - `a_single_node_data_directory_from_v0_1_opens`: a checkpoint (SAVE)
//!   and write-ahead log records after it, replayed on the start; every
//!   key's value, expiry (PEXPIRETIME, to the ms) and memcached flags, the
//!   key set exactly (KEYS, DBSIZE), deleted keys absent. Then a new write
//!   is read back, and read back again after a SIGKILL and a restart (the
//!   old log continued by this binary).
//! - `a_three_node_cluster_from_v0_1_opens`: the three nodes' Raft logs
//!   (no snapshot: 0.1 takes one per 100,000 entries), started at the
//!   Raft addresses they were made with (127.0.0.41-43:7001, which the
//!   membership in the log names); the same checks through every node with
//!   linearizable reads (RESP and memcached), then a write through the
//!   leader read back through every node.

mod support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One key as the old server served it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    key: Vec<u8>,
    value: Vec<u8>,
    /// PEXPIRETIME: unix ms, or -1 for none.
    expire_ms: i64,
    /// memcached client flags; `None` for a key memcached cannot name.
    flags: Option<u32>,
}

/// A fixture's `.keys` file: every key it holds, and keys it must not.
#[derive(Debug)]
struct Expected {
    keys: Vec<Key>,
    absent: Vec<Vec<u8>>,
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn unhex(s: &str) -> Vec<u8> {
    let digits = s
        .strip_prefix("0x")
        .unwrap_or_else(|| panic!("{s:?} is no 0x hex"));
    assert!(digits.len().is_multiple_of(2), "odd hex {s:?}");
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).expect("hex digits"))
        .collect()
}

fn read_expected(name: &str) -> Expected {
    let path = fixtures().join(format!("{name}.keys"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut keys = Vec::new();
    let mut absent = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split(' ').collect();
        match f[..] {
            ["key", key, value, expiry, flags] => keys.push(Key {
                key: unhex(key),
                value: unhex(value),
                expire_ms: match expiry {
                    "none" => -1,
                    at => at
                        .strip_prefix("at:")
                        .and_then(|t| t.parse().ok())
                        .unwrap_or_else(|| panic!("bad expiry in {line:?}")),
                },
                flags: match flags {
                    "-" => None,
                    n => Some(
                        n.parse()
                            .unwrap_or_else(|_| panic!("bad flags in {line:?}")),
                    ),
                },
            }),
            ["absent", key] => absent.push(unhex(key)),
            _ => panic!("{}: bad line {line:?}", path.display()),
        }
    }
    // A fixture this test reads nothing of would pass whatever it holds.
    assert!(keys.len() > 300, "{}: too few keys", path.display());
    assert!(keys.iter().any(|k| k.expire_ms > 0));
    assert!(keys.iter().any(|k| k.flags.is_some_and(|f| f > 0)));
    assert!(!absent.is_empty());
    Expected { keys, absent }
}

/// Copies a fixture into a fresh folder: the server writes to its data
/// directory, and the checked-in files must stay as the old binary left
/// them.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
    }
}

/// A fresh temporary folder for one test, removed when it passes (kept
/// with the nodes' logs when it fails).
struct TempRoot(PathBuf);

impl TempRoot {
    fn new(name: &str) -> TempRoot {
        let p = std::env::temp_dir().join(format!("combkv-old-data-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempRoot(p)
    }
}

impl Drop for TempRoot {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn connect(addr: SocketAddr) -> redis::Connection {
    let client = redis::Client::open(format!("redis://{addr}/")).unwrap();
    let con = client
        .get_connection_with_timeout(Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    con.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    con
}

/// Every expected key through RESP: value, expiry, the key set exactly,
/// the absent keys absent.
fn check_resp(con: &mut redis::Connection, exp: &Expected, what: &str) {
    let mut listed: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    listed.sort();
    let mut want: Vec<Vec<u8>> = exp.keys.iter().map(|k| k.key.clone()).collect();
    want.sort();
    if listed != want {
        let extra: Vec<_> = listed.iter().filter(|k| !want.contains(k)).collect();
        let missing: Vec<_> = want.iter().filter(|k| !listed.contains(k)).collect();
        panic!(
            "{what}: KEYS differs: {} extra {:?}, {} missing {:?}",
            extra.len(),
            extra
                .iter()
                .take(5)
                .map(|k| String::from_utf8_lossy(k))
                .collect::<Vec<_>>(),
            missing.len(),
            missing
                .iter()
                .take(5)
                .map(|k| String::from_utf8_lossy(k))
                .collect::<Vec<_>>(),
        );
    }
    let size: usize = redis::cmd("DBSIZE").query(con).unwrap();
    assert_eq!(size, exp.keys.len(), "{what}: DBSIZE");
    let mut gets = redis::pipe();
    let mut ttls = redis::pipe();
    for k in &exp.keys {
        gets.cmd("GET").arg(&k.key[..]);
        ttls.cmd("PEXPIRETIME").arg(&k.key[..]);
    }
    let values: Vec<Option<Vec<u8>>> = gets.query(con).unwrap();
    let expiries: Vec<i64> = ttls.query(con).unwrap();
    for ((k, v), t) in exp.keys.iter().zip(&values).zip(&expiries) {
        let name = String::from_utf8_lossy(&k.key);
        assert_eq!(
            v.as_deref(),
            Some(&k.value[..]),
            "{what}: the value of {name:?}"
        );
        assert_eq!(*t, k.expire_ms, "{what}: PEXPIRETIME of {name:?}");
    }
    let mut gets = redis::pipe();
    for k in &exp.absent {
        gets.cmd("GET").arg(&k[..]);
    }
    let values: Vec<Option<Vec<u8>>> = gets.query(con).unwrap();
    for (k, v) in exp.absent.iter().zip(values) {
        assert_eq!(
            v,
            None,
            "{what}: {:?} was deleted and is back",
            String::from_utf8_lossy(k)
        );
    }
}

/// Every key memcached can name, through memcached: its flags and value.
fn check_memcached(addr: SocketAddr, exp: &Expected, what: &str) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{what}: connecting to memcached at {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let named: Vec<&Key> = exp.keys.iter().filter(|k| k.flags.is_some()).collect();
    // One request each, sent together; the replies come in order.
    let mut req = Vec::new();
    for k in &named {
        req.extend_from_slice(b"get ");
        req.extend_from_slice(&k.key);
        req.extend_from_slice(b"\r\n");
    }
    s.write_all(&req).unwrap();
    let mut r = std::io::BufReader::new(s);
    let line = |r: &mut std::io::BufReader<TcpStream>| {
        let mut l = Vec::new();
        while !l.ends_with(b"\r\n") {
            let mut b = [0u8];
            r.read_exact(&mut b)
                .unwrap_or_else(|e| panic!("{what}: memcached reply: {e}"));
            l.push(b[0]);
        }
        l.truncate(l.len() - 2);
        String::from_utf8_lossy(&l).into_owned()
    };
    for k in named {
        let name = String::from_utf8_lossy(&k.key).into_owned();
        let head = line(&mut r);
        let f: Vec<&str> = head.split(' ').collect();
        assert!(
            f.len() == 4 && f[0] == "VALUE" && f[1] == name,
            "{what}: get {name} answered {head:?}"
        );
        assert_eq!(
            f[2].parse::<u32>().ok(),
            k.flags,
            "{what}: the flags of {name}"
        );
        let n: usize = f[3].parse().unwrap();
        let mut value = vec![0u8; n + 2];
        r.read_exact(&mut value).unwrap();
        assert_eq!(
            &value[..n],
            &k.value[..],
            "{what}: memcached value of {name}"
        );
        assert_eq!(line(&mut r), "END", "{what}: get {name}");
    }
}

/// Writes `key` through `writer` and reads it back, linearizably, through
/// every address of `readers`.
fn write_and_read_back(writer: SocketAddr, readers: &[SocketAddr], key: &str) {
    let value = format!("written by the current binary to {key}");
    let () = redis::cmd("SET")
        .arg(key)
        .arg(&value)
        .query(&mut connect(writer))
        .unwrap_or_else(|e| panic!("SET {key} through {writer}: {e}"));
    for &addr in readers {
        let got: Option<String> = redis::cmd("GET")
            .arg(key)
            .query(&mut connect(addr))
            .unwrap();
        assert_eq!(got.as_deref(), Some(value.as_str()), "{key} through {addr}");
    }
}

#[test]
fn a_single_node_data_directory_from_v0_1_opens() {
    let exp = read_expected("v0.1-single");
    let root = TempRoot::new("single");
    let dir = root.0.join("data");
    copy_dir(&fixtures().join("v0.1-single"), &dir);
    let args = [
        "--data-dir",
        dir.to_str().unwrap(),
        "--durability",
        "always",
        "--log-level",
        "warn",
    ];
    let mut server = support::Server::start(&args, None);
    check_resp(&mut connect(server.resp), &exp, "single node");
    check_memcached(server.memcached, &exp, "single node");
    write_and_read_back(server.resp, &[server.resp], "new:single");
    // The old files, continued by this binary, still recover whole.
    server.child.kill().expect("SIGKILL");
    server.child.wait().unwrap();
    drop(server);
    let server = support::Server::start(&args, None);
    let mut con = connect(server.resp);
    let got: Option<String> = redis::cmd("GET").arg("new:single").query(&mut con).unwrap();
    assert_eq!(
        got.as_deref(),
        Some("written by the current binary to new:single"),
        "the new write after a restart"
    );
    let () = redis::cmd("DEL").arg("new:single").query(&mut con).unwrap();
    check_resp(&mut con, &exp, "single node, restarted");
}

/// The Raft addresses the cluster fixture was made with: its log's
/// membership names them, so the nodes must listen there again.
const RAFT_PORT: u16 = 7001;
const PEERS: &str = "1=127.0.0.41:7001,2=127.0.0.42:7001,3=127.0.0.43:7001";

fn node_ip(id: u64) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 40 + id as u8))
}

/// Three `combkv serve` nodes, killed when dropped.
struct Nodes {
    children: Vec<Child>,
    resp: Vec<SocketAddr>,
    memcached: Vec<SocketAddr>,
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Nodes {
    fn start(root: &Path) -> Nodes {
        for id in 1..=3 {
            let raft = SocketAddr::new(node_ip(id), RAFT_PORT);
            if let Err(e) = TcpListener::bind(raft) {
                panic!(
                    "{raft} is not free ({e}): the cluster fixture's nodes must listen at \
                     the Raft addresses it was made with (127.0.0.41-43:{RAFT_PORT}); \
                     stop whatever holds it (another run of this test?)"
                );
            }
        }
        let mut nodes = Nodes {
            children: Vec::new(),
            resp: Vec::new(),
            memcached: Vec::new(),
        };
        for id in 1..=3u64 {
            let ip = node_ip(id);
            let resp = SocketAddr::new(ip, support::free_port_on(ip));
            let memcached = SocketAddr::new(ip, support::free_port_on(ip));
            let dir = root.join(format!("n{id}"));
            let log = std::fs::File::create(root.join(format!("n{id}.log"))).unwrap();
            let child = Command::new(support::binary())
                .args(["serve", "--node-id", &id.to_string()])
                .args(["--raft-addr", &SocketAddr::new(ip, RAFT_PORT).to_string()])
                .args(["--peers", PEERS])
                .args(["--resp", &resp.to_string()])
                .args(["--memcached", &memcached.to_string()])
                .args(["--data-dir", dir.to_str().unwrap()])
                .args(["--log-level", "warn"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("combkv starts");
            nodes.children.push(child);
            nodes.resp.push(resp);
            nodes.memcached.push(memcached);
        }
        nodes
    }

    /// The node's INFO replication and persistence fields (`loading`:
    /// whether it serves yet), if it answers.
    fn replication(&self, id: u64) -> Option<BTreeMap<String, String>> {
        let addr = self.resp[id as usize - 1];
        let c = redis::Client::open(format!("redis://{addr}/")).ok()?;
        let mut con = c.get_connection_with_timeout(Duration::from_secs(2)).ok()?;
        con.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        let text: String = redis::cmd("INFO")
            .arg("replication")
            .arg("persistence")
            .query(&mut con)
            .ok()?;
        Some(
            text.lines()
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.to_string(), v.trim().to_string()))
                .collect(),
        )
    }

    /// Waits for a leader that all three nodes agree on.
    fn leader(&mut self, within: Duration) -> u64 {
        let deadline = Instant::now() + within;
        loop {
            for (i, c) in self.children.iter_mut().enumerate() {
                if let Some(status) = c.try_wait().unwrap() {
                    panic!("node {} exited ({status}); see its log", i + 1);
                }
            }
            let infos: Vec<_> = (1..=3).map(|id| self.replication(id)).collect();
            if let [Some(a), Some(b), Some(c)] = &infos[..] {
                let leads: Vec<u64> = [a, b, c]
                    .iter()
                    .zip(1..)
                    .filter(|(r, _)| r.get("raft_role").map(String::as_str) == Some("leader"))
                    .map(|(_, id)| id)
                    .collect();
                let agreed = |k: &str| a.get(k) == b.get(k) && b.get(k) == c.get(k);
                if let [id] = leads[..]
                    && agreed("raft_term")
                    && a.get("raft_leader_id") == Some(&id.to_string())
                    && agreed("raft_leader_id")
                    && [a, b, c]
                        .iter()
                        .all(|r| r.get("loading").map(String::as_str) == Some("0"))
                {
                    return id;
                }
            }
            assert!(Instant::now() < deadline, "no leader within {within:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn a_three_node_cluster_from_v0_1_opens() {
    let exp = read_expected("v0.1-cluster");
    let root = TempRoot::new("cluster");
    for id in 1..=3 {
        copy_dir(
            &fixtures().join(format!("v0.1-cluster/n{id}")),
            &root.0.join(format!("n{id}")),
        );
    }
    let mut nodes = Nodes::start(&root.0);
    let leader = nodes.leader(Duration::from_secs(60));
    for id in 1..=3u64 {
        let what = format!("cluster node {id} (leader {leader})");
        let i = id as usize - 1;
        check_resp(&mut connect(nodes.resp[i]), &exp, &what);
        check_memcached(nodes.memcached[i], &exp, &what);
    }
    write_and_read_back(nodes.resp[leader as usize - 1], &nodes.resp, "new:cluster");
}
