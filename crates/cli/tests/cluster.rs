//! Process-level cluster tests: three `combkv serve` processes on loopback
//! addresses (nodes 1, 2, 3 at 127.0.0.1, .2, .3), clients through the
//! `redis` crate.
//!
//! - `acknowledged_writes_survive_kill_9_of_leader_or_follower`: writers
//!   send SET, DEL and INCR to any node while the leader or a follower is
//!   killed with SIGKILL and restarted, `COMBKV_CLUSTER_KILL9_CYCLES`
//!   times (default 10); afterwards every acknowledged write is on the
//!   node that leads, with its value.
//! - `a_leader_cut_off_stops_acknowledging_and_the_majority_elects`: the
//!   Raft traffic runs through a proxy per node that can cut one node off
//!   both ways; the cut-off leader acknowledges no write, the other two
//!   elect a leader and take writes, and once healed the old leader serves
//!   the new state.
//! - `a_node_is_added_caught_up_and_removed_while_clients_write`: `combkv
//!   cluster add` makes a fourth node a voter that serves every write
//!   acknowledged before; `combkv cluster remove` takes it out while
//!   writers go on.
//! - `a_pipeline_answers_alike_on_a_cluster_node_and_a_single_node`: one
//!   pipeline of writes and reads, RESP and memcached, through a single
//!   node, the leader and a follower gets the same replies (connections
//!   park on the log).
//! - `reads_after_every_node_is_killed_at_once_see_every_acknowledged_write`:
//!   writers on every node, SIGKILL of all three at once, restart, and
//!   reads through every node before any new write see every acknowledged
//!   write, `COMBKV_CLUSTER_RESTART_CYCLES` times (default 20).
//! - `a_write_is_parsed_once_and_crosses_each_hop_once`: each node's
//!   counts of requests parsed and ops and results encoded and decoded,
//!   around one SET on the leader and one on a follower.

mod support;

use support::node::free_addr;
use support::proxy::{Cut, Proxy};
use support::writes::{Acked, assert_all_acked, write_one};

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

/// One node's addresses and files.
#[derive(Clone)]
struct NodeSpec {
    id: u64,
    resp: SocketAddr,
    memcached: SocketAddr,
    /// Where it listens for Raft traffic.
    raft: SocketAddr,
    dir: PathBuf,
}

struct Cluster {
    specs: Vec<NodeSpec>,
    /// `id=addr,...` as the nodes are told (proxies, if any).
    peers: String,
    nodes: Vec<Option<Child>>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in self.nodes.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A node's log, beside its data directory (kept across restarts; the
/// test's directory is removed only when it passes).
fn log_file(dir: &Path) -> std::fs::File {
    std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.with_extension("log"))
        .unwrap()
}

/// A free port on node `id`'s own address. Probed there, not on
/// 127.0.0.1: the tests run side by side, and another test's node at
/// 127.0.0.3 may hold a port that is free at 127.0.0.1.
impl Cluster {
    /// Three nodes whose peers reach each other at `advertised(id)`.
    fn new(root: &Path, advertised: impl Fn(u64, SocketAddr) -> SocketAddr) -> Cluster {
        let _ = std::fs::remove_dir_all(root);
        let specs: Vec<NodeSpec> = (1..=3)
            .map(|id| NodeSpec {
                id,
                resp: free_addr(id),
                memcached: free_addr(id),
                raft: free_addr(id),
                dir: root.join(format!("n{id}")),
            })
            .collect();
        let peers = specs
            .iter()
            .map(|s| format!("{}={}", s.id, advertised(s.id, s.raft)))
            .collect::<Vec<_>>()
            .join(",");
        let mut c = Cluster {
            specs,
            peers,
            nodes: vec![None, None, None],
        };
        for id in 1..=3 {
            c.start(id);
        }
        c
    }

    fn start(&mut self, id: u64) {
        let peers = if id <= 3 {
            self.peers.clone()
        } else {
            String::new()
        };
        let s = &self.specs[id as usize - 1];
        let mut cmd = Command::new(support::binary());
        cmd.args(["serve", "--node-id", &id.to_string()])
            .args(["--raft-addr", &s.raft.to_string()]);
        if !peers.is_empty() {
            cmd.args(["--peers", &peers]);
            // Behind a proxy, the others reach it at the proxy: its own
            // entry in --peers, which must be its advertised address.
            let own = peers
                .split(',')
                .find_map(|p| p.strip_prefix(&format!("{id}=")))
                .expect("the node's own entry");
            if own != s.raft.to_string() {
                cmd.args(["--raft-advertise", own]);
            }
        }
        let child = cmd
            .args(["--resp", &s.resp.to_string()])
            .args(["--memcached", &s.memcached.to_string()])
            .args(["--data-dir", s.dir.to_str().unwrap()])
            .args(["--log-level", "warn"])
            .stdout(Stdio::null())
            .stderr(log_file(&s.dir))
            .spawn()
            .expect("combkv starts");
        self.nodes[id as usize - 1] = Some(child);
    }

    /// A fourth node, started without peers: it waits to be added.
    fn start_spare(&mut self, root: &Path) -> u64 {
        let id = self.specs.len() as u64 + 1;
        self.specs.push(NodeSpec {
            id,
            resp: free_addr(id),
            memcached: free_addr(id),
            raft: free_addr(id),
            dir: root.join(format!("n{id}")),
        });
        self.nodes.push(None);
        self.start(id);
        id
    }

    /// Runs `combkv cluster ARGS` against node `via`.
    fn admin(&self, via: u64, args: &[&str]) -> std::process::Output {
        Command::new(support::binary())
            .args([
                "cluster",
                "--server",
                &self.specs[via as usize - 1].resp.to_string(),
            ])
            .args(args)
            .output()
            .expect("combkv cluster runs")
    }

    fn kill(&mut self, id: u64) {
        if let Some(mut c) = self.nodes[id as usize - 1].take() {
            c.kill().expect("SIGKILL");
            c.wait().unwrap();
        }
    }

    fn url(&self, id: u64) -> String {
        format!("redis://{}/", self.specs[id as usize - 1].resp)
    }

    /// Waits until node `id` serves (INFO `loading:0`: recovered and, on a
    /// cluster node, caught up with its leader).
    fn wait_serving(&self, id: u64, within: Duration) {
        let deadline = Instant::now() + within;
        let serving = || {
            let c = redis::Client::open(self.url(id)).ok()?;
            let mut con = c.get_connection_with_timeout(Duration::from_secs(2)).ok()?;
            let text: String = redis::cmd("INFO").arg("persistence").query(&mut con).ok()?;
            Some(text.lines().any(|l| l.trim() == "loading:0"))
        };
        while serving() != Some(true) {
            assert!(
                Instant::now() < deadline,
                "node {id} not serving within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The node's INFO replication fields, if it answers.
    fn replication(&self, id: u64) -> Option<BTreeMap<String, String>> {
        let c = redis::Client::open(self.url(id)).ok()?;
        let mut con = c.get_connection_with_timeout(Duration::from_secs(2)).ok()?;
        con.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        let text: String = redis::cmd("INFO").arg("replication").query(&mut con).ok()?;
        Some(
            text.lines()
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.to_string(), v.trim().to_string()))
                .collect(),
        )
    }

    /// Waits for a leader that the nodes in `among` agree on, and for
    /// each of them to serve (caught up with it).
    fn leader(&self, among: &[u64], within: Duration) -> u64 {
        let deadline = Instant::now() + within;
        loop {
            for &id in among {
                if let Some(r) = self.replication(id)
                    && r.get("raft_role").map(String::as_str) == Some("leader")
                {
                    let term = r.get("raft_term").cloned();
                    let agreed = among.iter().all(|&o| {
                        self.replication(o).is_some_and(|f| {
                            f.get("raft_leader_id") == Some(&id.to_string())
                                && f.get("raft_term") == term.as_ref()
                        })
                    });
                    if agreed {
                        for &o in among {
                            self.wait_serving(o, within);
                        }
                        return id;
                    }
                }
            }
            assert!(Instant::now() < deadline, "no leader among {among:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Writers through any node: each sends `support::writes::write_one` to
/// one node, and after an error (no leader yet, the node killed) moves to
/// the next, until `stop`.
fn spawn_writers(
    cl: &Cluster,
    n: usize,
    acked: &Arc<Mutex<Acked>>,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<()>> {
    let urls: Vec<String> = (1..=3).map(|id| cl.url(id)).collect();
    (0..n)
        .map(|t| {
            let (urls, acked, stop) = (urls.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || writer(&urls, t, &acked, &stop))
        })
        .collect()
}

fn writer(urls: &[String], t: usize, acked: &Mutex<Acked>, stop: &AtomicBool) {
    let mut node = t;
    let mut con: Option<redis::Connection> = None;
    let mut i = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let Some(c) = con.as_mut() else {
            node = (node + 1) % urls.len();
            con = redis::Client::open(urls[node].as_str())
                .ok()
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)).ok());
            if let Some(c) = &con {
                let _ = c.set_read_timeout(Some(Duration::from_secs(15)));
            } else {
                std::thread::sleep(Duration::from_millis(50));
            }
            continue;
        };
        i += 1;
        if let Err(e) = write_one(acked, c, 0, t, i) {
            // A node without a leader answers at once: wait a little before
            // asking another one; a dead one has taken its time already.
            if !(e.is_io_error() || e.is_timeout() || e.is_connection_dropped()) {
                std::thread::sleep(Duration::from_millis(50));
            }
            con = None;
        }
    }
}

/// Every acknowledged write on node `id`, read linearizably.
fn check_acked(cl: &Cluster, id: u64, a: &Acked, when: &str) -> usize {
    let client = redis::Client::open(cl.url(id)).unwrap();
    let mut con = client.get_connection().unwrap();
    assert_all_acked(a, &mut con, &format!("{when}, node {id}"))
}

#[test]
fn acknowledged_writes_survive_kill_9_of_leader_or_follower() {
    let cycles: usize = support::env_number("COMBKV_CLUSTER_KILL9_CYCLES", 10);
    let root = std::env::temp_dir().join(format!("combkv-cluster-kill9-{}", std::process::id()));
    let mut cl = Cluster::new(&root, |_, raft| raft);
    cl.leader(&[1, 2, 3], Duration::from_secs(60));
    let acked = Arc::new(Mutex::new(Acked::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers = spawn_writers(&cl, 3, &acked, &stop);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x636c7573);
    for cycle in 0..cycles {
        std::thread::sleep(Duration::from_millis(rng.random_range(300..1500)));
        let leader = cl.leader(&[1, 2, 3], Duration::from_secs(60));
        let victim = if rng.random_bool(0.5) {
            leader
        } else {
            *[1, 2, 3]
                .iter()
                .filter(|&&n| n != leader)
                .nth(rng.random_range(0..2))
                .unwrap()
        };
        eprintln!("cycle {cycle}: killing node {victim} (leader {leader})");
        cl.kill(victim);
        // Down for long enough, often, that the others elect a new leader
        // (election timeouts are 1-2 s); a leader back sooner resumes.
        std::thread::sleep(Duration::from_millis(rng.random_range(200..3500)));
        cl.start(victim);
    }
    let leader = cl.leader(&[1, 2, 3], Duration::from_secs(60));
    stop.store(true, Ordering::SeqCst);
    for w in writers {
        w.join().unwrap();
    }
    let leader_after = cl.leader(&[1, 2, 3], Duration::from_secs(60));
    let a = acked.lock().unwrap();
    assert!(
        a.values.len() > 20,
        "too few writes were acknowledged to mean anything: {}",
        a.values.len()
    );
    let checked = check_acked(&cl, leader_after, &a, "after the kills");
    eprintln!(
        "{cycles} kills; {checked} acknowledged keys checked on leader {leader_after} \
         (leader before the writers stopped: {leader}); {} writes unanswered",
        a.in_flight.len()
    );
    // Every node, read linearizably, agrees.
    for id in 1..=3 {
        check_acked(&cl, id, &a, "on every node");
    }
    drop(cl);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_leader_cut_off_stops_acknowledging_and_the_majority_elects() {
    let root = std::env::temp_dir().join(format!("combkv-cluster-cut-{}", std::process::id()));
    let cut = Arc::new(Cut::default());
    let proxies = Mutex::new(BTreeMap::new());
    let mut cl = Cluster::new(&root, |id, raft| {
        let p = Proxy::start(id, raft, cut.clone());
        let a = p.addr;
        proxies.lock().unwrap().insert(id, p);
        a
    });
    let old = cl.leader(&[1, 2, 3], Duration::from_secs(60));
    let old_con = |cl: &Cluster| {
        let c = redis::Client::open(cl.url(old)).unwrap();
        let con = c.get_connection().unwrap();
        con.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        con
    };
    let mut con = old_con(&cl);
    redis::cmd("SET")
        .arg("before")
        .arg("1")
        .query::<()>(&mut con)
        .unwrap();
    // Reads on the leader take their read index from its lease: no round
    // of heartbeats while a majority answered its appends lately.
    for _ in 0..20 {
        let got: Option<String> = redis::cmd("GET").arg("before").query(&mut con).unwrap();
        assert_eq!(got.as_deref(), Some("1"));
    }
    let leased = |cl: &Cluster| -> u64 {
        cl.replication(old)
            .and_then(|r| r.get("raft_read_index_leased").cloned())
            .map_or(0, |n| n.parse().unwrap())
    };
    assert!(leased(&cl) > 0, "{:?}", cl.replication(old));

    // Cut the leader off, both ways.
    cut.isolate(old);
    let cut_at = Instant::now();
    let r = redis::cmd("SET")
        .arg("cut")
        .arg("old")
        .query::<()>(&mut con);
    assert!(
        r.is_err(),
        "the cut-off leader acknowledged a write ({:.1} s after the cut)",
        cut_at.elapsed().as_secs_f64()
    );
    eprintln!(
        "the cut-off leader refused a write after {:.1} s: {}",
        cut_at.elapsed().as_secs_f64(),
        r.unwrap_err()
    );
    let rest: Vec<u64> = (1..=3).filter(|&n| n != old).collect();
    let new = cl.leader(&rest, Duration::from_secs(60));
    assert_ne!(new, old);
    // The new leader saw the change (counted once a housekeeping tick).
    let deadline = Instant::now() + Duration::from_secs(10);
    while cl
        .replication(new)
        .and_then(|r| r.get("raft_leader_changes").cloned())
        .is_none_or(|n| n == "0")
    {
        assert!(
            Instant::now() < deadline,
            "no leader change counted on node {new}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "node {new} leads the majority {:.1} s after the cut",
        cut_at.elapsed().as_secs_f64()
    );
    let client = redis::Client::open(cl.url(new)).unwrap();
    let mut con_new = client.get_connection().unwrap();
    redis::cmd("SET")
        .arg("cut")
        .arg("new")
        .query::<()>(&mut con_new)
        .unwrap();
    // A linearizable read on the cut-off node is refused too, not stale.
    let mut con = old_con(&cl);
    let stale = redis::cmd("GET")
        .arg("cut")
        .query::<Option<String>>(&mut con);
    assert!(
        stale.is_err(),
        "the cut-off node served a read it cannot know is current: {stale:?}"
    );

    // Heal: the old leader follows and serves the new state.
    cut.heal();
    let leader = cl.leader(&[1, 2, 3], Duration::from_secs(60));
    eprintln!("healed; node {leader} leads all three");
    let mut con = old_con(&cl);
    let got: Option<String> = redis::cmd("GET").arg("cut").query(&mut con).unwrap();
    assert_eq!(got.as_deref(), Some("new"));
    let got: Option<String> = redis::cmd("GET").arg("before").query(&mut con).unwrap();
    assert_eq!(got.as_deref(), Some("1"));
    cl.kill(1);
    drop(cl);
    drop(proxies);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_node_is_added_caught_up_and_removed_while_clients_write() {
    let root = std::env::temp_dir().join(format!("combkv-cluster-members-{}", std::process::id()));
    let mut cl = Cluster::new(&root, |_, raft| raft);
    let leader = cl.leader(&[1, 2, 3], Duration::from_secs(60));
    let acked = Arc::new(Mutex::new(Acked::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers = spawn_writers(&cl, 2, &acked, &stop);
    std::thread::sleep(Duration::from_millis(500));

    // A node started without peers is no member until the leader adds it.
    let spare = cl.start_spare(&root);
    let deadline = Instant::now() + Duration::from_secs(30);
    while cl.replication(spare).is_none() {
        assert!(Instant::now() < deadline, "node {spare} did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let raft = cl.specs[spare as usize - 1].raft.to_string();
    // Sent to a follower, the error names the leader.
    let follower = (1..=3).find(|&n| n != leader).unwrap();
    let out = cl.admin(follower, &["add", &spare.to_string(), &raft]);
    assert!(!out.status.success());
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(why.contains(&format!("node {leader}")), "{why}");
    let out = cl.admin(leader, &["add", &spare.to_string(), &raft]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = cl.admin(leader, &["status"]);
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains(&format!("member:id={spare},addr={raft},voter")),
        "{status}"
    );
    // The new voter serves once it has seen that it caught up (a read
    // index of its own; `LOADING` until then, which clients retry).
    cl.wait_serving(spare, Duration::from_secs(30));
    // The new voter has caught up: everything acknowledged so far reads
    // back from it (linearizably, so no later than the leader's state). The
    // writers go on meanwhile: a key since written again, or being written
    // (in flight), may show the newer state.
    let a = acked.lock().unwrap().values.clone();
    let client = redis::Client::open(cl.url(spare)).unwrap();
    let mut con = client.get_connection().unwrap();
    for (k, v) in &a {
        let got: Option<String> = redis::cmd("GET").arg(k).query(&mut con).unwrap();
        let now = acked.lock().unwrap();
        assert!(
            got.as_ref() == Some(v)
                || now.values.get(k) != Some(v)
                || now.in_flight.get(k) == Some(&got),
            "the added node has {k}={got:?}, acknowledged {v}"
        );
    }
    let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut con).unwrap();
    assert_eq!(role[0], redis::Value::BulkString(b"slave".to_vec()));
    // The leader as a Redis tool would reach it: its RESP address.
    let resp = cl.specs[leader as usize - 1].resp;
    assert_eq!(
        role[1],
        redis::Value::BulkString(resp.ip().to_string().into_bytes())
    );
    assert_eq!(role[2], redis::Value::Int(i64::from(resp.port())));

    // Removed again while the writers go on.
    let out = cl.admin(leader, &["remove", &spare.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = cl.admin(leader, &["status"]);
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(!status.contains(&format!("member:id={spare}")), "{status}");
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::SeqCst);
    for w in writers {
        w.join().unwrap();
    }
    let a = acked.lock().unwrap();
    assert!(
        a.values.len() > 10,
        "few writes acknowledged: {}",
        a.values.len()
    );
    let leader = cl.leader(&[1, 2, 3], Duration::from_secs(60));
    check_acked(&cl, leader, &a, "after the membership changes");
    drop(cl);
    let _ = std::fs::remove_dir_all(&root);
}

/// One pipeline of writes and reads, keys under `p`, in inline form: a
/// command that writes several times, reads of the connection's own
/// writes, conditional writes that fail, a RANGE; ECHO marks its end.
fn mixed_pipeline(p: &str) -> Vec<u8> {
    let cmds = [
        "SET {p}k1 v1",
        "GET {p}k1",
        "SET {p}k2 v2",
        "MSET {p}k3 x {p}k4 y",
        "GET {p}k3",
        "DEL {p}k1 {p}k2 {p}nokey",
        "EXISTS {p}k1 {p}k3",
        "INCR {p}n",
        "INCR {p}n",
        "INCRBY {p}n 5",
        "GET {p}n",
        "APPEND {p}k3 zz",
        "GET {p}k3",
        "SETNX {p}k3 q",
        "SET {p}k5 v NX",
        "SET {p}k5 w XX GET",
        "MGET {p}k3 {p}k4 {p}k5 {p}k1",
        "RANGE [{p} + LIMIT 20",
        "INCR {p}k3",
        "GET {p}nokey",
        "SETEX {p}t 100 v",
        "GETSET {p}t w",
        "TTL {p}t",
        // A transaction (one log entry on a cluster), a watched one that
        // aborts, and one that fails while queuing.
        "WATCH {p}n {p}w",
        "MULTI",
        "INCR {p}n",
        "GET {p}n",
        "SET {p}k9 v9",
        "MGET {p}k9 {p}nokey",
        "INCR {p}k3",
        "PING",
        "RANGE [{p}k ({p}l KEYSONLY",
        "FLOOR {p}k95",
        "EXEC",
        "WATCH {p}w",
        "SET {p}w changed",
        "MULTI",
        "SET {p}k9 lost",
        "EXEC",
        "MULTI",
        "SET {p}k9",
        "EXEC",
        "GET {p}k9",
        // Read-then-write commands, one op each through the log.
        "MSETNX {p}x1 1 {p}x2 2",
        "MSETNX {p}x2 9 {p}x3 3",
        "RENAME {p}x1 {p}x4",
        "RENAMENX {p}x4 {p}x2",
        "COPY {p}x2 {p}x5",
        "GETEX {p}x5 PX 100000",
        "GETRANGE {p}k9 0 0",
        "MGET {p}x1 {p}x2 {p}x3 {p}x4 {p}x5",
        "INCRBYFLOAT {p}f 10.5",
        "INCRBYFLOAT {p}f 0.1",
        // COMPARE: checks decided at the transaction's place in the log.
        "MULTI",
        "COMPARE {p}k9 VALUE = v9",
        "COMPARE RANGE [{p}x ({p}x9 COUNT = 3",
        "SET {p}c ok",
        "EXEC",
        "MULTI",
        "COMPARE {p}k9 VALUE = nope",
        "SET {p}c bad",
        "EXEC",
        "COMPARE RANGE [{p}x ({p}x9 COUNT = 3",
        "GET {p}c",
        "ECHO end-of-pipeline",
    ];
    cmds.iter()
        .map(|c| c.replace("{p}", p) + "\r\n")
        .collect::<String>()
        .into_bytes()
}

/// The same for memcached: text and meta commands, keys under `p`; `mn`
/// marks its end.
fn mixed_memcached_pipeline(p: &str) -> Vec<u8> {
    [
        "set {p}a 5 0 2\r\nhi",
        "get {p}a",
        "append {p}a 0 0 2\r\nyo",
        "prepend {p}a 0 0 1\r\n>",
        "incr {p}n 1",
        "set {p}n 0 0 1\r\n5",
        "incr {p}n 3",
        "decr {p}n 10",
        "add {p}a 0 0 1\r\nx",
        "replace {p}z 0 0 1\r\nx",
        "get {p}a {p}n",
        "delete {p}a",
        "delete {p}a",
        "set {p}q 0 0 1 noreply\r\nq",
        "ms {p}m 2 T0\r\nhi",
        "mg {p}m v",
        "mg {p}q v",
        "get {p}a {p}n",
        "mn",
    ]
    .iter()
    .map(|c| c.replace("{p}", p) + "\r\n")
    .collect::<String>()
    .into_bytes()
}

/// INFO stats' commands and error replies counted at `addr` so far.
fn counted(addr: SocketAddr) -> (u64, u64) {
    let mut con = redis::Client::open(format!("redis://{addr}/"))
        .unwrap()
        .get_connection()
        .unwrap();
    let text: String = redis::cmd("INFO").arg("stats").query(&mut con).unwrap();
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .trim()
            .parse()
            .unwrap()
    };
    (
        field("total_commands_processed"),
        field("total_error_replies"),
    )
}

/// memcached's per-command counters (`stats`) of the server at `addr`.
fn mc_counted(addr: SocketAddr) -> std::collections::BTreeMap<String, u64> {
    const NAMES: &[&str] = &[
        "cmd_get",
        "cmd_set",
        "cmd_touch",
        "cmd_meta",
        "get_hits",
        "get_misses",
        "delete_hits",
        "delete_misses",
        "incr_hits",
        "incr_misses",
        "decr_hits",
        "decr_misses",
        "cas_hits",
        "cas_misses",
        "cas_badval",
        "touch_hits",
        "touch_misses",
        "total_items",
    ];
    let text = run_pipeline(addr, b"stats\r\n", b"END\r\n");
    text.lines()
        .filter_map(|l| {
            let mut w = l.strip_prefix("STAT ")?.split(' ');
            let (name, value) = (w.next()?, w.next()?);
            NAMES
                .contains(&name)
                .then(|| (name.to_string(), value.parse().unwrap()))
        })
        .collect()
}

/// What each counter gained from `before` to `after`.
fn mc_delta(
    before: &std::collections::BTreeMap<String, u64>,
    after: &std::collections::BTreeMap<String, u64>,
) -> std::collections::BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before[k]))
        .collect()
}

/// Sends a whole pipeline in one write and reads every reply, up to `end`.
fn run_pipeline(addr: SocketAddr, pipeline: &[u8], end: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(pipeline).unwrap();
    let got = support::read_until(&mut s, end, Duration::from_secs(30));
    String::from_utf8(got).unwrap()
}

/// A cluster node parks a connection on its writes (their replies held
/// until the log answers) and on read indexes (`park`): a pipeline through
/// the leader or a follower must answer exactly as a single node does.
#[test]
fn a_pipeline_answers_alike_on_a_cluster_node_and_a_single_node() {
    let root = std::env::temp_dir().join(format!("combkv-cluster-pipe-{}", std::process::id()));
    let cl = Cluster::new(&root, |_, raft| raft);
    let single = support::Server::start(&[], None);
    let resp_end: &[u8] = b"$15\r\nend-of-pipeline\r\n";
    // memcached's `stats` is a command too: read outside the windows.
    let mc_before = mc_counted(single.memcached);
    let before = counted(single.resp);
    let want = run_pipeline(single.resp, &mixed_pipeline("a:"), resp_end);
    assert!(
        want.contains("$2\r\nv1\r\n") && want.contains(":7\r\n"),
        "{want}"
    );
    assert!(!want.contains("CLUSTERDOWN"), "{want}");
    assert!(
        want.contains("*8\r\n:8\r\n$1\r\n8\r\n+OK\r\n*2\r\n$2\r\nv9\r\n$-1\r\n")
            && want.contains("*-1\r\n")
            && want.contains("-EXECABORT")
            && want.contains("*3\r\n:1\r\n:1\r\n+OK\r\n")
            && want.contains(":1\r\n$2\r\nok\r\n$15\r\nend-of-pipeline"),
        "{want}"
    );
    let mc_want = run_pipeline(single.memcached, &mixed_memcached_pipeline("m:"), b"MN\r\n");
    assert!(mc_want.contains("VALUE m:a 5 5\r\n>hiyo\r\n"), "{mc_want}");
    assert!(!mc_want.contains("ERROR"), "{mc_want}");
    let after = counted(single.resp);
    let counts_want = (after.0 - before.0, after.1 - before.1);
    let mc_counts_want = mc_delta(&mc_before, &mc_counted(single.memcached));
    assert!(mc_counts_want["cmd_set"] > 0, "{mc_counts_want:?}");

    let leader = cl.leader(&[1, 2, 3], Duration::from_secs(60));
    let follower = (1..=3).find(|&n| n != leader).unwrap();
    let spec = |id: u64| &cl.specs[id as usize - 1];
    let got = run_pipeline(spec(leader).resp, &mixed_pipeline("a:"), resp_end);
    assert_eq!(got, want, "through the leader");
    let got = run_pipeline(spec(follower).resp, &mixed_pipeline("b:"), resp_end);
    assert_eq!(got.replace("b:", "a:"), want, "through a follower");
    // memcached: keys of its own everywhere (the RESP pipelines wrote a:n).
    let mc = |id: u64, p: &str| {
        run_pipeline(spec(id).memcached, &mixed_memcached_pipeline(p), b"MN\r\n").replace(p, "m:")
    };
    assert_eq!(mc(leader, "c:"), mc_want, "memcached through the leader");
    assert_eq!(mc(follower, "d:"), mc_want, "memcached through a follower");
    // A request that waited for the log counts once, as on a single node.
    let mc_before = mc_counted(spec(follower).memcached);
    let before = counted(spec(follower).resp);
    run_pipeline(spec(follower).resp, &mixed_pipeline("e:"), resp_end);
    mc(follower, "f:");
    let after = counted(spec(follower).resp);
    let counts = (after.0 - before.0, after.1 - before.1);
    assert_eq!(
        counts, counts_want,
        "(commands, errors) counted on a follower"
    );
    // And memcached's per-command counters too.
    let mc_counts = mc_delta(&mc_before, &mc_counted(spec(follower).memcached));
    assert_eq!(
        mc_counts, mc_counts_want,
        "memcached stats counted on a follower"
    );
    drop(cl);
    let _ = std::fs::remove_dir_all(&root);
}

/// Writer `t` of a whole-cluster-crash cycle: `write_one`'s SET, DEL and
/// INCR through the nodes in turn (an error moves it to the next node),
/// until `stop` or the nodes are gone.
fn cycle_writer(urls: &[String], cycle: usize, t: usize, acked: &Mutex<Acked>, stop: &AtomicBool) {
    let mut node = t;
    let mut con: Option<redis::Connection> = None;
    for i in 0u64.. {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Some(c) = con.as_mut() else {
            node = (node + 1) % urls.len();
            con = redis::Client::open(urls[node].as_str())
                .ok()
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)).ok());
            match &con {
                Some(c) => {
                    let _ = c.set_read_timeout(Some(Duration::from_secs(15)));
                }
                None => std::thread::sleep(Duration::from_millis(50)),
            }
            continue;
        };
        if write_one(acked, c, cycle, t, i).is_err() {
            con = None;
        }
    }
}

/// What node `id` serves right after a restart, before any new write: one
/// pipeline of a RANGE over the cycle's keys, the counter, and a GET of
/// every key ever acknowledged, each read linearizably. None while the
/// node is not ready (no leader yet: an error, not a stale answer).
type Served = (Vec<String>, Option<i64>, Vec<Option<String>>);

fn read_after_restart(cl: &Cluster, id: u64, cycle: usize, keys: &[String]) -> Option<Served> {
    let client = redis::Client::open(cl.url(id)).ok()?;
    let mut con = client
        .get_connection_with_timeout(Duration::from_secs(1))
        .ok()?;
    con.set_read_timeout(Some(Duration::from_secs(15))).ok()?;
    let mut pipe = redis::pipe();
    pipe.cmd("RANGE")
        .arg(format!("[c{cycle}-"))
        .arg(format!("(c{cycle}."))
        .cmd("GET")
        .arg("counter");
    for k in keys {
        pipe.cmd("GET").arg(k);
    }
    let mut replies: Vec<redis::Value> = pipe.query(&mut con).ok()?;
    let values = replies.split_off(2);
    let text = |v: &redis::Value| -> Option<String> {
        redis::from_redis_value::<Option<String>>(v.clone()).unwrap()
    };
    let range: Vec<String> = redis::from_redis_value(replies[0].clone()).unwrap();
    let counter = text(&replies[1]).map(|n| n.parse().unwrap());
    Some((range, counter, values.iter().map(text).collect()))
}

/// The defect this guards: a leader restarted with its followers takes up
/// its saved leadership in the same term, and its read index (a lazily
/// saved commit point) missed acknowledged writes until the next write.
/// Each cycle writes through every node, kills all three with SIGKILL at
/// once, restarts them, and reads through every node before any new
/// write: every acknowledged write must be there.
/// `COMBKV_CLUSTER_RESTART_CYCLES` sets the cycles (default 20).
#[test]
fn reads_after_every_node_is_killed_at_once_see_every_acknowledged_write() {
    let cycles: usize = support::env_number("COMBKV_CLUSTER_RESTART_CYCLES", 20);
    let root = std::env::temp_dir().join(format!("combkv-cluster-all9-{}", std::process::id()));
    let mut cl = Cluster::new(&root, |_, raft| raft);
    let urls: Vec<String> = (1..=3).map(|id| cl.url(id)).collect();
    let acked = Arc::new(Mutex::new(Acked::default()));
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x616c6c39);
    for cycle in 0..cycles {
        let leader = cl.leader(&[1, 2, 3], Duration::from_secs(60));
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..3)
            .map(|t| {
                let (urls, acked, stop) = (urls.clone(), acked.clone(), stop.clone());
                std::thread::spawn(move || cycle_writer(&urls, cycle, t, &acked, &stop))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(rng.random_range(300..1200)));
        // All three at once, writes in flight.
        for c in cl.nodes.iter_mut().flatten() {
            c.kill().expect("SIGKILL");
        }
        for id in 1..=3 {
            cl.kill(id);
        }
        stop.store(true, Ordering::SeqCst);
        for w in writers {
            w.join().unwrap();
        }
        for id in 1..=3 {
            cl.start(id);
        }
        let a = acked.lock().unwrap();
        let keys: Vec<String> = a.values.keys().chain(&a.deleted).cloned().collect();
        for id in 1..=3 {
            let deadline = Instant::now() + Duration::from_secs(60);
            let (range, counter, got) = loop {
                if let Some(r) = read_after_restart(&cl, id, cycle, &keys) {
                    break r;
                }
                assert!(Instant::now() < deadline, "node {id} serves no reads");
                std::thread::sleep(Duration::from_millis(20));
            };
            let ctx = format!("cycle {cycle} (leader {leader} before), node {id}");
            assert!(
                counter.unwrap_or(0) >= a.counter,
                "{ctx}: counter {counter:?}, acknowledged {}",
                a.counter
            );
            for (k, got) in keys.iter().zip(&got) {
                let want = a.values.get(k);
                let alt = a.in_flight.get(k);
                assert!(
                    got.as_ref() == want || alt.is_some_and(|alt| alt == got),
                    "{ctx}: acknowledged {k}={want:?} read as {got:?}"
                );
            }
            let listed: BTreeMap<&str, &str> = range
                .chunks(2)
                .map(|kv| (kv[0].as_str(), kv[1].as_str()))
                .collect();
            let prefix = format!("c{cycle}-");
            for (k, v) in a.values.range(prefix.clone()..) {
                if !k.starts_with(&prefix) {
                    break;
                }
                let alt = a.in_flight.get(k);
                let seen = listed.get(k.as_str()).map(|s| s.to_string());
                assert!(
                    seen.as_ref() == Some(v) || alt.is_some_and(|alt| *alt == seen),
                    "{ctx}: RANGE lists acknowledged {k}={v} as {seen:?}"
                );
            }
        }
        eprintln!(
            "cycle {cycle}: {} keys and counter {} read back through all three nodes",
            keys.len(),
            a.counter
        );
    }
    drop(cl);
    let _ = std::fs::remove_dir_all(&root);
}

/// INFO through a raw connection (a client library may send requests of
/// its own on connecting, and every request counts here): the fields of
/// every section, after `INFO` and an `ECHO` that marks its end, two
/// requests parsed.
fn raw_info(addr: SocketAddr) -> BTreeMap<String, u64> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"*1\r\n$4\r\nINFO\r\n*2\r\n$4\r\nECHO\r\n$7\r\ninfoend\r\n")
        .unwrap();
    let got = support::read_until(&mut s, b"$7\r\ninfoend\r\n", Duration::from_secs(10));
    String::from_utf8(got)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(':'))
        .filter_map(|(k, v)| Some((k.to_string(), v.trim().parse().ok()?)))
        .collect()
}

/// What a node counted: (requests parsed, ops encoded, ops decoded,
/// results encoded, results decoded).
fn hops(info: &BTreeMap<String, u64>) -> [u64; 5] {
    [
        "total_requests_parsed",
        "cluster_ops_encoded",
        "cluster_ops_decoded",
        "cluster_results_encoded",
        "cluster_results_decoded",
    ]
    .map(|f| info[f])
}

/// A write is parsed and decided once where it arrives, encoded once into
/// the log (or the forwarded batch), decoded once where each node applies
/// it, and its result crosses back only from a leader to the follower that
/// forwarded it: counted by each node's INFO around one SET on the leader
/// and one on a follower.
#[test]
fn a_write_is_parsed_once_and_crosses_each_hop_once() {
    let root = std::env::temp_dir().join(format!("combkv-cluster-hops-{}", std::process::id()));
    let cl = Cluster::new(&root, |_, raft| raft);
    let leader = cl.leader(&[1, 2, 3], Duration::from_secs(60));
    let follower = (1..=3).find(|&n| n != leader).unwrap();
    let resp = |id: u64| cl.specs[id as usize - 1].resp;
    let applied = |info: &BTreeMap<String, u64>| info["raft_applied_index"];
    // One SET through `via`; then every node's counts once all applied it.
    let set_through = |via: u64, key: &str| -> Vec<[u64; 5]> {
        let before: Vec<_> = (1..=3).map(|id| raw_info(resp(id))).collect();
        let mut s = TcpStream::connect(resp(via)).unwrap();
        let req = format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$1\r\nv\r\n", key.len());
        s.write_all(req.as_bytes()).unwrap();
        support::read_until(&mut s, b"+OK\r\n", Duration::from_secs(30));
        let target = applied(&raw_info(resp(leader)));
        let mut polls = [0u64; 3];
        let after: Vec<_> = (1..=3)
            .map(|id| {
                loop {
                    polls[id as usize - 1] += 1;
                    let info = raw_info(resp(id));
                    if applied(&info) >= target {
                        break info;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
            .collect();
        polls[leader as usize - 1] += 1;
        (0..3)
            .map(|i| {
                let (b, a) = (hops(&before[i]), hops(&after[i]));
                let mut d = [0; 5];
                for f in 0..5 {
                    d[f] = a[f] - b[f];
                }
                // Each INFO after `before` is two requests parsed.
                d[0] -= 2 * polls[i];
                d
            })
            .collect()
    };
    let at = |id: u64| id as usize - 1;
    let d = set_through(leader, "hops:leader");
    assert_eq!(d[at(leader)], [1, 1, 1, 0, 0], "the leader, SET on it");
    for id in (1..=3).filter(|&n| n != leader) {
        assert_eq!(
            d[at(id)],
            [0, 0, 1, 0, 0],
            "follower {id}, SET on the leader"
        );
    }
    let d = set_through(follower, "hops:follower");
    assert_eq!(
        d[at(follower)],
        [1, 1, 1, 0, 1],
        "the follower it was sent to"
    );
    assert_eq!(
        d[at(leader)],
        [0, 0, 1, 1, 0],
        "the leader it was forwarded to"
    );
    for id in (1..=3).filter(|&n| n != leader && n != follower) {
        assert_eq!(
            d[at(id)],
            [0, 0, 1, 0, 0],
            "node {id}, which only applied it"
        );
    }
    drop(cl);
    let _ = std::fs::remove_dir_all(&root);
}
