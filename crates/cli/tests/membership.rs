//! Membership mistakes an operator can make, and how a cluster refuses
//! them (`docs/cluster.md`, "Administration"), with real processes on
//! loopback addresses (node N at 127.0.0.N):
//!
//! - `an_unreachable_node_is_not_added_and_a_one_node_cluster_still_stops`:
//!   `combkv cluster add` of an address where nothing listens, on a
//!   one-node cluster, fails within its timeout and leaves the voters as
//!   they were; an add cut short by SIGTERM lets the node stop at once.
//! - `ids_in_use_and_ids_of_removed_voters_are_refused`: on three nodes,
//!   an unreachable node is not made a voter, an id in the cluster is
//!   refused, and the id of a removed voter is refused on every node, after
//!   a restart too.
//! - `peers_that_disagree_with_the_cluster_are_named_and_refused`: a node
//!   whose `--peers` has another node at another address says so in `INFO
//!   replication` while it runs, and refuses to start again with it.
//! - `a_peers_entry_that_is_not_the_raft_addr_is_refused`: the node does
//!   not start.
//! - `a_node_without_a_leader_says_why`: a leader without its majority,
//!   then a follower left alone, name their term and the peers they cannot
//!   reach.
//! - `a_node_that_is_no_member_says_whom_it_waits_for`: a node whose
//!   `--peers` names a first node that never forms the cluster, and one
//!   started to be added that never is.

mod support;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One node's addresses, files and process.
struct Node {
    id: u64,
    resp: SocketAddr,
    raft: SocketAddr,
    dir: PathBuf,
    child: Option<Child>,
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn ip(id: u64) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, id as u8))
}

/// A port nothing listens on at node `id`'s address.
fn free_addr(id: u64) -> SocketAddr {
    SocketAddr::new(ip(id), support::free_port_on(ip(id)))
}

impl Node {
    fn new(root: &Path, id: u64) -> Node {
        Node {
            id,
            resp: free_addr(id),
            raft: free_addr(id),
            dir: root.join(format!("n{id}")),
            child: None,
        }
    }

    /// `combkv serve` for this node with `peers` (none if empty) and
    /// `extra` arguments; its log goes beside its data directory.
    fn command(&self, peers: &str, extra: &[&str]) -> Command {
        std::fs::create_dir_all(self.dir.parent().unwrap()).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.with_extension("log"))
            .unwrap();
        let mut cmd = Command::new(support::binary());
        cmd.args(["serve", "--node-id", &self.id.to_string()])
            .args(["--raft-addr", &self.raft.to_string()])
            .args(["--resp", &self.resp.to_string()])
            .args(["--memcached", "off"])
            .args(["--data-dir", self.dir.to_str().unwrap()])
            .args(["--log-level", "info"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if !peers.is_empty() {
            cmd.args(["--peers", peers]);
        }
        cmd
    }

    /// Starts the node and waits until it answers PING: with PONG, or
    /// with LOADING while it has no leader to catch up with (a node that
    /// waits to be added, or the first of a cluster's nodes to start).
    fn start(&mut self, peers: &str) {
        self.start_with(peers, &[]);
    }

    /// [`Node::start`] with `extra` arguments.
    fn start_with(&mut self, peers: &str, extra: &[&str]) {
        let child = self.command(peers, extra).spawn().expect("combkv starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        let wait = Duration::from_millis(500);
        while !support::ask(self.resp, b"PING\r\n", b"+PONG\r\n", wait)
            && !support::ask(self.resp, b"PING\r\n", b"-LOADING", wait)
        {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("node {} exited ({status}): {}", self.id, self.log_tail());
            }
            assert!(
                Instant::now() < deadline,
                "node {} does not answer",
                self.id
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // And until its Raft log is open (its status says what it is).
        while self
            .try_status()
            .is_none_or(|s| s.get("raft_role").map(String::as_str) == Some("loading"))
        {
            assert!(
                Instant::now() < deadline,
                "node {} never opened its log",
                self.id
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the node with arguments it must refuse; returns what it said.
    fn refused_start(&self, peers: &str) -> String {
        let out = self
            .command(peers, &[])
            .stderr(Stdio::piped())
            .spawn()
            .expect("combkv starts");
        let out = wait_output(out, Duration::from_secs(20));
        let text = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "node {} started: {text}", self.id);
        text
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// Sends SIGTERM; how long the process took to exit (None: not within
    /// `within`, and it is then killed).
    fn terminate(&mut self, within: Duration) -> Option<Duration> {
        let mut c = self.child.take()?;
        let start = Instant::now();
        // SAFETY: a signal to a child this test started and has not reaped.
        unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
        while start.elapsed() < within {
            if c.try_wait().unwrap().is_some() {
                return Some(start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
        None
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.with_extension("log")).unwrap_or_default();
        text[text.len().saturating_sub(3000)..].to_string()
    }

    fn connect(&self) -> redis::Connection {
        let c = redis::Client::open(format!("redis://{}/", self.resp)).unwrap();
        let con = c
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap();
        con.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        con
    }

    /// `INFO replication` (and `CLUSTER STATUS`'s extra lines) as fields.
    fn status(&self) -> BTreeMap<String, String> {
        self.try_status()
            .unwrap_or_else(|| panic!("node {} does not answer", self.id))
    }

    /// `INFO ranges` as fields (asked again while the node loads).
    fn info_ranges(&self) -> BTreeMap<String, String> {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let mut con = self.connect();
            let text: String = redis::cmd("INFO").arg("ranges").query(&mut con).unwrap();
            let fields: BTreeMap<String, String> = text
                .lines()
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.to_string(), v.trim().to_string()))
                .collect();
            if fields.get("ranges_hosted").is_some_and(|h| h != "0")
                || std::time::Instant::now() > deadline
            {
                return fields;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// [`Node::status`], None if the node does not answer.
    fn try_status(&self) -> Option<BTreeMap<String, String>> {
        let c = redis::Client::open(format!("redis://{}/", self.resp)).ok()?;
        let mut con = c.get_connection_with_timeout(Duration::from_secs(2)).ok()?;
        con.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        let text: String = redis::cmd("CLUSTER").arg("STATUS").query(&mut con).ok()?;
        let mut fields = BTreeMap::new();
        let mut members = Vec::new();
        for (k, v) in text.lines().filter_map(|l| l.split_once(':')) {
            if k == "member" {
                members.push(v.to_string());
            } else {
                fields.insert(k.to_string(), v.trim().to_string());
            }
        }
        fields.insert("members".into(), members.join(" "));
        Some(fields)
    }

    /// Waits until `f` holds for the node's status.
    fn wait_status(
        &self,
        what: &str,
        within: Duration,
        f: impl Fn(&BTreeMap<String, String>) -> bool,
    ) -> BTreeMap<String, String> {
        let deadline = Instant::now() + within;
        loop {
            let s = self.status();
            if f(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "node {}: not {what} within {within:?}: {s:#?}",
                self.id
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn is_leader(&self) -> BTreeMap<String, String> {
        self.wait_status("the leader", Duration::from_secs(30), |s| {
            s.get("raft_role").map(String::as_str) == Some("leader")
        })
    }
}

/// The node that leads, once one of `nodes` says it does.
fn find_leader(nodes: &[Node]) -> &Node {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = nodes.iter().filter(|n| n.child.is_some()).find(|n| {
            n.try_status()
                .is_some_and(|s| s.get("raft_role").map(String::as_str) == Some("leader"))
        });
        if let Some(n) = found {
            return n;
        }
        assert!(Instant::now() < deadline, "no leader");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `id=raft-addr,...` of `nodes`.
fn peers(nodes: &[&Node]) -> String {
    nodes
        .iter()
        .map(|n| format!("{}={}", n.id, n.raft))
        .collect::<Vec<_>>()
        .join(",")
}

/// Waits for `child` to exit within `within` (killed and failed if not).
fn wait_output(mut child: Child, within: Duration) -> std::process::Output {
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > within {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after {within:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `combkv cluster ARGS` against `via`; (success, stdout + stderr).
/// A command still running after `within` fails the test.
fn admin(via: &Node, args: &[&str], within: Duration) -> (bool, String) {
    let child = Command::new(support::binary())
        .args(["cluster", "--server", &via.resp.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("combkv cluster runs");
    let out = wait_output(child, within);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `combkv cluster ranges` through `node`, asked again while the node
/// still says it is loading its Raft log.
fn ranges(node: &Node) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, said) = admin(node, &["ranges"], Duration::from_secs(30));
        if ok {
            return said;
        }
        assert!(
            said.contains("loading") && Instant::now() < deadline,
            "{said}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn root(name: &str) -> PathBuf {
    let r = std::env::temp_dir().join(format!("combkv-membership-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&r);
    r
}

fn set(node: &Node, key: &str) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("v")
        .query(&mut node.connect())
        .unwrap_or_else(|e| panic!("SET {key} through node {}: {e}", node.id));
}

/// `INFO replication`'s field `name`, empty if the node has none.
fn field<'a>(s: &'a BTreeMap<String, String>, name: &str) -> &'a str {
    s.get(name).map_or("", String::as_str)
}

#[test]
fn an_unreachable_node_is_not_added_and_a_one_node_cluster_still_stops() {
    let root = root("one");
    let mut n1 = Node::new(&root, 1);
    n1.start(&peers(&[&n1]));
    n1.is_leader();

    // An add that waits (30 s by default) for a node that is not there,
    // cut short by SIGTERM: the event loop it holds lets go, the node
    // stops at once.
    let waiting = Command::new(support::binary())
        .args(["cluster", "--server", &n1.resp.to_string()])
        .args(["add", "3", &free_addr(3).to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let took = n1.terminate(Duration::from_secs(10));
    assert!(
        took.is_some_and(|t| t < Duration::from_secs(5)),
        "SIGTERM during an add: stopped after {took:?}; log: {}",
        n1.log_tail()
    );
    let out = wait_output(waiting, Duration::from_secs(10));
    assert!(!out.status.success());
    // Restarted, it is the one voter it was, without a learner.
    n1.start(&peers(&[&n1]));
    let s = n1.is_leader();
    assert_eq!(
        (field(&s, "raft_voters"), field(&s, "raft_learners")),
        ("1", "0"),
        "{s:#?}"
    );

    // Given a timeout, the add fails within it, with why, and leaves the
    // voters as they were.
    let nowhere = free_addr(2).to_string();
    let start = Instant::now();
    let (ok, said) = admin(
        &n1,
        &["add", "2", &nowhere, "--timeout", "2"],
        Duration::from_secs(30),
    );
    assert!(!ok, "an unreachable node was added: {said}");
    assert!(
        said.contains(&format!("node 2 at {nowhere} did not catch up within 2 s"))
            && said.contains("sending to it fails")
            && said.contains("the voters are unchanged"),
        "{said}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    let s = n1.status();
    assert_eq!(
        (field(&s, "raft_voters"), field(&s, "raft_learners")),
        ("1", "0"),
        "{s:#?}"
    );
    set(&n1, "after-the-add");
    // The same id may be tried again: it never was a voter.
    let (ok, said) = admin(
        &n1,
        &["add", "2", &nowhere, "--timeout", "1"],
        Duration::from_secs(30),
    );
    assert!(
        !ok && said.contains("did not catch up within 1 s"),
        "{said}"
    );
    let took = n1.terminate(Duration::from_secs(10));
    assert!(took.is_some_and(|t| t < Duration::from_secs(5)), "{took:?}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn ids_in_use_and_ids_of_removed_voters_are_refused() {
    let root = root("ids");
    let mut nodes: Vec<Node> = (1..=3).map(|id| Node::new(&root, id)).collect();
    let list = peers(&nodes.iter().collect::<Vec<_>>());
    for n in &mut nodes {
        n.start(&list);
    }
    let leader = find_leader(&nodes).id;
    let l = &nodes[leader as usize - 1];

    // One range holds the whole keyspace, on the three voters.
    let said = ranges(l);
    assert!(said.starts_with("ranges:1\n"), "{said}");
    assert!(
        said.contains("range 0 [\"\", end) epoch 0.")
            && said.contains("voters [1, 2, 3]")
            && said.contains(&format!("leader {leader} keys 0 ")),
        "{said}"
    );

    // INFO ranges: one range, held by every node, led by the leader.
    for n in &nodes {
        let r = n.info_ranges();
        let leads = u8::from(n.id == leader).to_string();
        for (k, v) in [
            ("ranges", "1"),
            ("ranges_hosted", "1"),
            ("ranges_leading", leads.as_str()),
            ("ranges_stale_replicas", "0"),
            ("ranges_keys", "0"),
            ("ranges_splits_applied", "0"),
        ] {
            assert_eq!(field(&r, k), v, "node {} {k}: {r:?}", n.id);
        }
    }

    // An id in the cluster, at its own address or another.
    let gone = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let survivor = 6 - leader - gone;
    let nowhere = free_addr(4).to_string();
    for addr in [nodes[gone as usize - 1].raft.to_string(), nowhere.clone()] {
        let (ok, said) = admin(
            l,
            &["add", &gone.to_string(), &addr],
            Duration::from_secs(30),
        );
        assert!(!ok, "node {gone} added again: {said}");
        assert!(
            said.contains(&format!("node {gone} is already a voter")),
            "{said}"
        );
    }

    // A removed voter's id: refused at once by the leader.
    let (ok, said) = admin(l, &["remove", &gone.to_string()], Duration::from_secs(30));
    assert!(ok, "{said}");
    nodes[gone as usize - 1].kill();
    let l = &nodes[leader as usize - 1];
    let spare = free_addr(gone).to_string();
    let (ok, said) = admin(
        l,
        &["add", &gone.to_string(), &spare],
        Duration::from_secs(30),
    );
    assert!(!ok, "a removed id was given again: {said}");
    assert!(said.contains("ids are never reused"), "{said}");
    let (ok, said) = admin(l, &["remove", &gone.to_string()], Duration::from_secs(30));
    assert!(!ok && said.contains("was removed already"), "{said}");
    let s = nodes[survivor as usize - 1].wait_status(
        "told of the retired id",
        Duration::from_secs(10),
        |s| field(s, "retired_ids") == gone.to_string(),
    );
    assert_eq!(field(&s, "raft_voters"), "2", "{s:#?}");
    // The range follows the membership: two voters, and a conf_ver that
    // moved with it (the removal's log index).
    let mut two = [leader, survivor];
    two.sort_unstable();
    let said = ranges(&nodes[survivor as usize - 1]);
    assert!(said.contains(&format!("voters {two:?}")), "{said}");
    assert!(!said.contains("epoch 0.0 "), "{said}");

    // Both restarted (the log read again) know it too, and whichever
    // leads refuses the id.
    for id in [leader, survivor] {
        nodes[id as usize - 1].kill();
    }
    for id in [leader, survivor] {
        nodes[id as usize - 1].start(&list);
    }
    for id in [leader, survivor] {
        nodes[id as usize - 1].wait_status(
            "told of the retired id",
            Duration::from_secs(30),
            |s| field(s, "retired_ids") == gone.to_string(),
        );
    }
    let l = find_leader(&nodes);
    let (ok, said) = admin(
        l,
        &["add", &gone.to_string(), &spare],
        Duration::from_secs(30),
    );
    assert!(!ok && said.contains("ids are never reused"), "{said}");

    // Nothing listens there: not made a voter, and the two voters keep
    // their quorum.
    let (ok, said) = admin(
        l,
        &["add", "4", &nowhere, "--timeout", "2"],
        Duration::from_secs(30),
    );
    assert!(
        !ok && said.contains("did not catch up within 2 s"),
        "{said}"
    );
    let s = l.status();
    assert_eq!(
        (field(&s, "raft_voters"), field(&s, "raft_learners")),
        ("2", "0"),
        "{s:#?}"
    );
    set(l, "after-the-add");
    drop(nodes);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn peers_that_disagree_with_the_cluster_are_named_and_refused() {
    let root = root("peers");
    let mut nodes: Vec<Node> = (1..=3).map(|id| Node::new(&root, id)).collect();
    let list = peers(&nodes.iter().collect::<Vec<_>>());
    // Node 3 is told node 2 is elsewhere; node 1 forms the cluster from
    // the right list, and node 3 learns it from the leader.
    let wrong = free_addr(2);
    let bad_list = format!("1={},2={wrong},3={}", nodes[0].raft, nodes[2].raft);
    nodes[0].start(&list);
    nodes[1].start(&list);
    nodes[2].start(&bad_list);
    let difference = format!(
        "--peers has node 2 at {wrong}, the cluster has it at {}",
        nodes[1].raft
    );
    let s = nodes[2].wait_status("told of the disagreement", Duration::from_secs(30), |s| {
        field(s, "cluster_problem").contains(&difference)
    });
    assert!(
        field(&s, "cluster_problem").contains("disagrees with the membership"),
        "{s:#?}"
    );
    assert!(
        nodes[2].log_tail().contains(&difference),
        "{}",
        nodes[2].log_tail()
    );
    // The nodes that were told the right list see no problem.
    assert_eq!(nodes[0].status()["cluster_problem"], "");

    // Started again with it, node 3 refuses; with an id that never was a
    // member too.
    nodes[2].kill();
    let said = nodes[2].refused_start(&bad_list);
    assert!(said.contains(&difference), "{said}");
    let extra = free_addr(5);
    let said = nodes[2].refused_start(&format!("{list},5={extra}"));
    assert!(
        said.contains(&format!(
            "--peers names node 5 at {extra}, which is no member"
        )),
        "{said}"
    );
    // With the right list it starts, and nothing is wrong.
    nodes[2].start(&list);
    nodes[2].wait_status("without a problem", Duration::from_secs(30), |s| {
        field(s, "cluster_problem").is_empty() && !field(s, "raft_leader_id").is_empty()
    });
    drop(nodes);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_peers_entry_that_is_not_the_raft_addr_is_refused() {
    let root = root("own");
    let n1 = Node::new(&root, 1);
    let n2 = Node::new(&root, 2);
    let elsewhere = free_addr(1);
    let said = n1.refused_start(&format!("1={elsewhere},2={}", n2.raft));
    assert!(
        said.contains(&format!(
            "--peers has this node (id 1) at {elsewhere}, but its --raft-addr is {}",
            n1.raft
        )),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_node_without_a_leader_says_why() {
    let root = root("alone");
    let mut nodes: Vec<Node> = (1..=3).map(|id| Node::new(&root, id)).collect();
    let list = peers(&nodes.iter().collect::<Vec<_>>());
    for n in &mut nodes {
        n.start(&list);
    }
    let unreachable = |n: &Node| format!("node {} at {} is unreachable", n.id, n.raft);

    // A leader whose followers are gone stays leader (openraft 0.9 has no
    // check-quorum) and acknowledges nothing: it says it has no majority.
    let leader = find_leader(&nodes).id as usize - 1;
    let (f1, f2) = ((leader + 1) % 3, (leader + 2) % 3);
    // One follower gone: the leader says so once, with what to do, while
    // it still serves (no problem); openraft's own warnings, several a
    // second, stay below the log level.
    nodes[f1].kill();
    let silent = format!(
        "node {} at {} has not answered this leader for 5 s",
        nodes[f1].id, nodes[f1].raft
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !nodes[leader].log_tail().contains(&silent) {
        assert!(Instant::now() < deadline, "{}", nodes[leader].log_tail());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(nodes[leader].status()["cluster_problem"], "");
    let log = std::fs::read_to_string(nodes[leader].dir.with_extension("log")).unwrap();
    assert_eq!(log.matches(&silent).count(), 1, "{log}");
    assert!(!log.contains("WARN openraft"), "{log}");
    nodes[f2].kill();
    let (u1, u2) = (unreachable(&nodes[f1]), unreachable(&nodes[f2]));
    let s = nodes[leader].wait_status("saying why", Duration::from_secs(30), |s| {
        let p = field(s, "cluster_problem");
        p.contains(&u1) && p.contains(&u2)
    });
    let p = field(&s, "cluster_problem");
    assert!(
        p.starts_with(&format!("this node leads term {}", s["raft_term"]))
            && p.contains("only 1 of its 3 voters"),
        "{p}"
    );
    assert!(
        nodes[leader]
            .log_tail()
            .contains("cluster problem: this node leads")
    );
    nodes[f1].start(&list);
    nodes[leader].wait_status("without a problem", Duration::from_secs(30), |s| {
        field(s, "cluster_problem").is_empty()
    });
    let back = format!("node {} answers this leader again", nodes[f1].id);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !nodes[leader].log_tail().contains(&back) {
        assert!(Instant::now() < deadline, "{}", nodes[leader].log_tail());
        std::thread::sleep(Duration::from_millis(200));
    }

    // A follower left alone stands for election again and again: it says
    // it has had no leader, in which term, and whom it cannot reach.
    let leader = find_leader(&nodes).id as usize - 1;
    let alone = if leader == f1 { (leader + 1) % 3 } else { f1 };
    let other = 3 - leader - alone;
    if nodes[other].child.is_none() {
        nodes[other].start(&list);
    }
    nodes[alone].wait_status("following", Duration::from_secs(30), |s| {
        !field(s, "raft_leader_id").is_empty()
    });
    nodes[leader].kill();
    nodes[other].kill();
    let (u1, u2) = (unreachable(&nodes[leader]), unreachable(&nodes[other]));
    let s = nodes[alone].wait_status("saying why", Duration::from_secs(30), |s| {
        let p = field(s, "cluster_problem");
        p.contains(&u1) && p.contains(&u2)
    });
    let p = field(&s, "cluster_problem");
    // Its term climbs with every election it stands in, so the one the
    // text names may be behind INFO's by now.
    assert!(p.starts_with("no leader for "), "{p}");
    assert!(
        p.contains("this node is a candidate in term ")
            || p.contains("this node is a follower in term "),
        "{p}"
    );
    assert!(
        nodes[alone]
            .log_tail()
            .contains("cluster problem: no leader")
    );
    // Once a peer is back and a leader elected, the problem is gone.
    nodes[other].start(&list);
    nodes[alone].wait_status("without a problem", Duration::from_secs(30), |s| {
        field(s, "cluster_problem").is_empty() && !field(s, "raft_leader_id").is_empty()
    });
    drop(nodes);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_node_that_is_no_member_says_whom_it_waits_for() {
    let root = root("waiting");
    let n1 = Node::new(&root, 1);
    let mut n2 = Node::new(&root, 2);
    let mut n4 = Node::new(&root, 4);
    // Node 2's list names node 1, which forms the cluster, but node 1 is
    // not running; node 4 was started to be added and never was.
    n2.start(&peers(&[&n1, &n2]));
    n4.start("");
    let s = n2.wait_status("saying why", Duration::from_secs(30), |s| {
        field(s, "cluster_problem").contains("not a member of any cluster")
    });
    assert!(
        field(&s, "cluster_problem")
            .contains("node 1, the lowest id in --peers, forms the cluster"),
        "{s:#?}"
    );
    assert!(n2.log_tail().contains("cluster problem: not a member"));
    let s = n4.wait_status("saying why", Duration::from_secs(30), |s| {
        field(s, "cluster_problem").contains("not a member of any cluster")
    });
    assert!(
        field(&s, "cluster_problem").contains("`combkv cluster add 4`"),
        "{s:#?}"
    );
    // Waiting to be added is no fault: said at info, not as a warning.
    let log = n4.log_tail();
    assert!(
        log.contains("cluster: not a member") && !log.contains("cluster problem"),
        "{log}"
    );
    drop((n2, n4));
    let _ = std::fs::remove_dir_all(&root);
}

/// A keyspace split into three ranges on three processes: every key is
/// written and read through any node, batched reads (MGET, pipelined GETs
/// and RANGEs) and scans (RANGE with and without LIMIT, REV, SCAN, KEYS,
/// DBSIZE, FLOOR, CEIL) answer across the ranges as one store would, a
/// write whose keys lie in two ranges is refused as Redis Cluster's
/// `CROSSSLOT` and changes nothing, as does SNAPSHOT, and a restart of
/// every node keeps the ranges and every key.
#[test]
fn a_keyspace_split_into_ranges_is_served_whole_by_every_node() {
    let root = root("split");
    let mut nodes: Vec<Node> = (1..=3).map(|id| Node::new(&root, id)).collect();
    let list = peers(&nodes.iter().collect::<Vec<_>>());
    for n in &mut nodes {
        n.start(&list);
    }
    find_leader(&nodes);
    wait_serving(&nodes);
    let key = |i: usize| format!("k{i:03}");
    let mut cons: Vec<redis::Connection> = nodes.iter().map(Node::connect).collect();
    for i in 0..200 {
        let _: () = redis::cmd("SET")
            .arg(key(i))
            .arg(format!("a{i}"))
            .query(&mut cons[i % 3])
            .unwrap();
    }
    // Two splits, asked of two nodes: range 0 at k100, then the new range
    // 1 at k150 (recorded in the map, then carried out by its leader).
    let (ok, said) = admin(&nodes[1], &["split", "k100"], Duration::from_secs(30));
    assert!(ok && said.trim() == "1", "{said}");
    let (ok, said) = admin(&nodes[2], &["split", "k150"], Duration::from_secs(30));
    assert!(ok && said.trim() == "2", "{said}");
    let (ok, said) = admin(&nodes[0], &["split", "k150"], Duration::from_secs(30));
    assert!(!ok && said.contains("starts at this key already"), "{said}");
    let settled = |n: &Node| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = n.info_ranges();
            if field(&r, "ranges") == "3" && field(&r, "ranges_hosted") == "3" {
                return r;
            }
            assert!(Instant::now() < deadline, "node {}: {r:?}", n.id);
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    for n in &nodes {
        let r = settled(n);
        assert_eq!(field(&r, "ranges_splits_applied"), "2", "{r:?}");
        assert_eq!(field(&r, "ranges_keys"), "200", "{r:?}");
    }
    let said = ranges(&nodes[0]);
    assert!(said.starts_with("ranges:3\n"), "{said}");
    for (id, lo, hi) in [
        (0, "\"\"", "\"k100\""),
        (1, "\"k100\"", "\"k150\""),
        (2, "\"k150\"", "end"),
    ] {
        assert!(said.contains(&format!("range {id} [{lo}, {hi})")), "{said}");
    }
    // Writes through every node land in their ranges; reads through every
    // node see them.
    for i in 0..200 {
        let _: () = redis::cmd("SET")
            .arg(key(i))
            .arg(format!("b{i}"))
            .query(&mut cons[(i + 1) % 3])
            .unwrap();
    }
    for (n, con) in cons.iter_mut().enumerate() {
        for i in (0..200).step_by(7) {
            let v: String = redis::cmd("GET").arg(key(i)).query(con).unwrap();
            assert_eq!(v, format!("b{i}"), "node {} key {i}", n + 1);
        }
        // One batch across the three ranges, pipelined GETs too.
        let keys: Vec<String> = [5, 120, 199, 99, 100, 149, 150].map(key).to_vec();
        let got: Vec<String> = redis::cmd("MGET").arg(&keys).query(con).unwrap();
        let want: Vec<String> = [5, 120, 199, 99, 100, 149, 150]
            .map(|i| format!("b{i}"))
            .to_vec();
        assert_eq!(got, want, "node {}", n + 1);
        let mut pipe = redis::pipe();
        for k in &keys {
            pipe.cmd("GET").arg(k);
        }
        pipe.cmd("RANGE").arg("[k098").arg("[k152");
        pipe.cmd("RANGE")
            .arg("[k090")
            .arg("+")
            .arg("LIMIT")
            .arg("70");
        let (g0, g1, g2, g3, g4, g5, g6, r1, r2): (
            String,
            String,
            String,
            String,
            String,
            String,
            String,
            Vec<String>,
            Vec<String>,
        ) = pipe.query(con).unwrap();
        assert_eq!(vec![g0, g1, g2, g3, g4, g5, g6], want, "node {}", n + 1);
        let pairs = |from: usize, to: usize| -> Vec<String> {
            (from..to).flat_map(|i| [key(i), format!("b{i}")]).collect()
        };
        assert_eq!(r1, pairs(98, 153), "node {}", n + 1);
        assert_eq!(r2, pairs(90, 160), "node {}", n + 1);
        // Scans across every range, one at a time too.
        let all: Vec<String> = redis::cmd("RANGE")
            .arg("-")
            .arg("+")
            .arg("KEYSONLY")
            .query(con)
            .unwrap();
        assert_eq!(all, (0..200).map(key).collect::<Vec<_>>(), "node {}", n + 1);
        let rev: Vec<String> = redis::cmd("RANGE")
            .arg("(k095")
            .arg("[k160")
            .arg("KEYSONLY")
            .arg("REV")
            .arg("LIMIT")
            .arg("20")
            .query(con)
            .unwrap();
        assert_eq!(
            rev,
            (141..=160).rev().map(key).collect::<Vec<_>>(),
            "node {}",
            n + 1
        );
        let n_keys: i64 = redis::cmd("DBSIZE").query(con).unwrap();
        assert_eq!(n_keys, 200);
        let info: String = redis::cmd("INFO").arg("keyspace").query(con).unwrap();
        assert!(info.contains("db0:keys=200,"), "{info}");
        let mut listed: Vec<String> = redis::cmd("KEYS").arg("k1*").query(con).unwrap();
        listed.sort();
        assert_eq!(listed, (100..200).map(key).collect::<Vec<_>>());
        let mut scanned = Vec::new();
        let mut cursor = "0".to_string();
        loop {
            let (next, page): (String, Vec<String>) = redis::cmd("SCAN")
                .arg(&cursor)
                .arg("COUNT")
                .arg(30)
                .query(con)
                .unwrap();
            scanned.extend(page);
            if next == "0" {
                break;
            }
            cursor = next;
        }
        scanned.sort();
        assert_eq!(
            scanned,
            (0..200).map(key).collect::<Vec<_>>(),
            "node {}",
            n + 1
        );
        let floor: Vec<String> = redis::cmd("FLOOR").arg("k100").query(con).unwrap();
        assert_eq!(floor, [key(100), "b100".into()]);
        let floor: Vec<String> = redis::cmd("FLOOR").arg("k0999").query(con).unwrap();
        assert_eq!(floor, [key(99), "b99".into()]);
        let ceil: Vec<String> = redis::cmd("CEIL").arg("k1495").query(con).unwrap();
        assert_eq!(ceil, [key(150), "b150".into()]);
    }
    // A write of two ranges' keys, and a snapshot of them all: refused,
    // nothing changed.
    let e = redis::cmd("MSET")
        .arg(key(1))
        .arg("x")
        .arg(key(199))
        .arg("y")
        .query::<()>(&mut cons[0])
        .unwrap_err();
    assert_eq!(e.code(), Some("CROSSSLOT"), "{e}");
    let e = redis::cmd("SNAPSHOT")
        .arg("CREATE")
        .query::<i64>(&mut cons[1])
        .unwrap_err();
    assert_eq!(e.code(), Some("CROSSSLOT"), "{e}");
    // A backup would be one range's store: refused, saying why.
    let e = redis::cmd("BACKUP")
        .arg(root.join("backup").to_str().unwrap())
        .query::<()>(&mut cons[0])
        .unwrap_err();
    assert!(e.to_string().contains("split into ranges"), "{e}");
    // One range's keys in one write: taken.
    let _: () = redis::cmd("MSET")
        .arg(key(101))
        .arg("c")
        .arg(key(102))
        .arg("c")
        .query(&mut cons[2])
        .unwrap();
    let got: Vec<String> = redis::cmd("MGET")
        .arg(key(1))
        .arg(key(199))
        .arg(key(101))
        .query(&mut cons[0])
        .unwrap();
    assert_eq!(got, ["b1", "b199", "c"]);
    // Every node restarted: three ranges, every key.
    drop(cons);
    for n in &mut nodes {
        n.kill();
    }
    for n in &mut nodes {
        n.start(&list);
    }
    find_leader(&nodes);
    wait_serving(&nodes);
    for n in &nodes {
        settled(n);
        let mut con = n.connect();
        let all: Vec<String> = redis::cmd("RANGE")
            .arg("-")
            .arg("+")
            .query(&mut con)
            .unwrap();
        assert_eq!(all.len(), 400, "node {}", n.id);
        let v: String = redis::cmd("GET").arg(key(160)).query(&mut con).unwrap();
        assert_eq!(v, "b160");
    }
    drop(nodes);
    let _ = std::fs::remove_dir_all(&root);
}

/// Ranges split on their own as the data grows past
/// `--cluster-range-split-bytes`, each at the key that halves its bytes,
/// while writers go on through every node: every key stays readable
/// through every node, and the ranges cover the keys in balanced parts.
#[test]
fn ranges_split_on_their_own_as_the_data_grows() {
    let root = root("bysize");
    let mut nodes: Vec<Node> = (1..=3).map(|id| Node::new(&root, id)).collect();
    let list = peers(&nodes.iter().collect::<Vec<_>>());
    for n in &mut nodes {
        n.start_with(&list, &["--cluster-range-split-bytes", "64kb"]);
    }
    find_leader(&nodes);
    wait_serving(&nodes);
    let mut cons: Vec<redis::Connection> = nodes.iter().map(Node::connect).collect();
    let key = |i: usize| format!("key{i:05}");
    let value = "v".repeat(100);
    // 4,000 keys of about 110 bytes each (some 440 KB), in a scattered
    // order, a hundred to a pipeline.
    const KEYS: usize = 4000;
    write_scattered(&mut cons, KEYS, &value);
    let deadline = Instant::now() + Duration::from_secs(60);
    let ranges = loop {
        let r = nodes[0].info_ranges();
        let n: usize = field(&r, "ranges").parse().unwrap_or(0);
        if n >= 4 && field(&r, "ranges_hosted") == n.to_string() {
            break n;
        }
        assert!(Instant::now() < deadline, "{r:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    for (n, con) in cons.iter_mut().enumerate() {
        let count: i64 = redis::cmd("DBSIZE").query(con).unwrap();
        assert_eq!(count as usize, KEYS, "node {}", n + 1);
        let all: Vec<String> = redis::cmd("RANGE")
            .arg("-")
            .arg("+")
            .arg("KEYSONLY")
            .query(con)
            .unwrap();
        assert_eq!(
            all,
            (0..KEYS).map(key).collect::<Vec<_>>(),
            "node {}",
            n + 1
        );
        for i in (0..KEYS).step_by(97) {
            let v: String = redis::cmd("GET").arg(key(i)).query(con).unwrap();
            assert_eq!(v, value);
        }
    }
    // Each split halved a range's bytes: no range holds more than the
    // limit's worth of keys, and none is nearly empty.
    let said = ranges_settled(&nodes[0]);
    let keys: Vec<usize> = said
        .lines()
        .filter_map(|l| l.split(" keys ").nth(1))
        .filter_map(|rest| rest.split(' ').next()?.parse().ok())
        .collect();
    assert!(keys.len() >= ranges, "{said}");
    assert_eq!(keys.iter().sum::<usize>(), KEYS, "{said}");
    assert!(keys.iter().all(|&k| k >= 200), "{said}");
    drop(nodes);
    let _ = std::fs::remove_dir_all(&root);
}

/// `combkv cluster ranges` once it gives this node's keys for every range
/// it lists (a split's new group starts a moment after the map has it).
fn ranges_settled(node: &Node) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let said = ranges(node);
        let listed = said
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("ranges:"))
            .and_then(|n| n.trim().parse::<usize>().ok());
        if listed == Some(said.lines().filter(|l| l.contains(" keys ")).count()) {
            return said;
        }
        assert!(Instant::now() < deadline, "{said}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Five processes whose ranges split by size and are placed on three
/// nodes each (`--cluster-range-replicas 3`): once the placement settles,
/// no node holds every range, yet every key is read through every node
/// (a range a node holds no replica of is read at one that does), and
/// writes through every node land. A sixth node added takes its share of
/// the ranges; a node removed hands its replicas to the others.
#[test]
fn ranges_placed_on_three_of_five_nodes_are_read_through_every_node() {
    let root = root("placed");
    let mut nodes: Vec<Node> = (1..=5).map(|id| Node::new(&root, id)).collect();
    let list = peers(&nodes.iter().collect::<Vec<_>>());
    let args = [
        "--cluster-range-split-bytes",
        "64kb",
        "--cluster-range-replicas",
        "3",
    ];
    for n in &mut nodes {
        n.start_with(&list, &args);
    }
    find_leader(&nodes);
    wait_serving(&nodes);
    let mut cons: Vec<redis::Connection> = nodes.iter().map(Node::connect).collect();
    let key = |i: usize| format!("key{i:05}");
    const KEYS: usize = 3000;
    let value = "v".repeat(100);
    write_scattered(&mut cons, KEYS, &value);
    // Settled: at least four ranges, each but range 0 on three of the
    // members, every member holding some but not all of them, and no
    // replica left where a range moved away from.
    let settled = |members: &[&Node], what: &str| {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let infos: Vec<_> = members.iter().map(|n| n.info_ranges()).collect();
            let ranges: usize = field(&infos[0], "ranges").parse().unwrap_or(0);
            let hosted: Vec<usize> = infos
                .iter()
                .map(|r| field(r, "ranges_hosted").parse().unwrap_or(0))
                .collect();
            let stale: usize = infos
                .iter()
                .map(|r| {
                    field(r, "ranges_stale_replicas")
                        .parse::<usize>()
                        .unwrap_or(0)
                })
                .sum();
            if ranges >= 4
                && hosted.iter().sum::<usize>() == members.len() + 3 * (ranges - 1)
                && hosted.iter().all(|&h| h > 1 && h < ranges)
                && stale == 0
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not placed: {infos:?}\n{}",
                self::ranges(members[0])
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    settled(&nodes.iter().collect::<Vec<_>>(), "five nodes");
    // What this test wrote over the first values, by key number.
    let mut written: std::collections::HashMap<usize, String> = Default::default();
    let mut check = |cons: &mut [redis::Connection], round: &str| {
        for (n, con) in cons.iter_mut().enumerate() {
            let all: Vec<String> = redis::cmd("RANGE")
                .arg("-")
                .arg("+")
                .arg("KEYSONLY")
                .query(con)
                .unwrap();
            assert_eq!(all, (0..KEYS).map(key).collect::<Vec<_>>(), "{round} {n}");
            let count: i64 = redis::cmd("DBSIZE").query(con).unwrap();
            assert_eq!(count as usize, KEYS, "{round} {n}");
            let keys: Vec<String> = (0..KEYS).step_by(131).map(key).collect();
            let got: Vec<String> = redis::cmd("MGET").arg(&keys).query(con).unwrap();
            let want: Vec<String> = (0..KEYS)
                .step_by(131)
                .map(|i| written.get(&i).cloned().unwrap_or_else(|| value.clone()))
                .collect();
            assert_eq!(got, want, "{round} {n}");
            for i in (0..KEYS).step_by(293) {
                let v = format!("{round}{n}");
                written.insert(i, v.clone());
                let _: () = redis::cmd("SET").arg(key(i)).arg(&v).query(con).unwrap();
                let got: String = redis::cmd("GET").arg(key(i)).query(con).unwrap();
                assert_eq!(got, v, "{round} {n} key {i}");
            }
        }
    };
    check(&mut cons, "five");

    // A sixth node joins: it takes its share of the ranges.
    let mut sixth = Node::new(&root, 6);
    sixth.start_with("", &args);
    let leader = find_leader(&nodes);
    let (ok, said) = admin(
        leader,
        &["add", "6", &sixth.raft.to_string()],
        Duration::from_secs(60),
    );
    assert!(ok, "{said}");
    nodes.push(sixth);
    settled(&nodes.iter().collect::<Vec<_>>(), "six nodes");
    cons.push(nodes[5].connect());
    check(&mut cons, "six");

    // A node leaves: its replicas are handed to the others, and it keeps
    // none once out.
    let leader_id = find_leader(&nodes).id;
    let gone = if leader_id == 2 { 3 } else { 2 };
    let (ok, said) = admin(
        find_leader(&nodes),
        &["remove", &gone.to_string()],
        Duration::from_secs(60),
    );
    assert!(ok, "{said}");
    let stay: Vec<&Node> = nodes.iter().filter(|n| n.id != gone).collect();
    settled(&stay, "after a removal");
    nodes[gone as usize - 1].kill();
    cons.remove(gone as usize - 1);
    check(&mut cons, "five again");
    drop(cons);
    drop(nodes);
    let _ = std::fs::remove_dir_all(&root);
}

/// Waits until every node of `nodes` answers PING with PONG (a cluster
/// node answers LOADING until it has caught up with its leader).
fn wait_serving(nodes: &[Node]) {
    for n in nodes {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !support::ask(
            n.resp,
            b"PING\r\n",
            b"+PONG\r\n",
            Duration::from_millis(500),
        ) {
            assert!(Instant::now() < deadline, "node {} does not serve", n.id);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// SETs `key00000`... up to `keys` to `value`, in a scattered order, a
/// hundred to a pipeline, each pipeline through the next connection.
fn write_scattered(cons: &mut [redis::Connection], keys: usize, value: &str) {
    for (turn, chunk) in (0..keys).collect::<Vec<_>>().chunks(100).enumerate() {
        let mut pipe = redis::pipe();
        for &i in chunk {
            pipe.cmd("SET")
                .arg(format!("key{:05}", (i * 7919) % keys))
                .arg(value)
                .ignore();
        }
        let n = cons.len();
        let _: () = pipe.query(&mut cons[turn % n]).unwrap();
    }
}

/// Writers go on through every node while ranges split on their own and a
/// node is killed with SIGKILL and started again: every write that was
/// acknowledged is there afterwards, through every node, with its value or
/// a later one sent (whose answer was lost), never an older one.
#[test]
fn acknowledged_writes_survive_splits_and_a_killed_node() {
    let root = root("splitkill");
    let mut nodes: Vec<Node> = (1..=3).map(|id| Node::new(&root, id)).collect();
    let list = peers(&nodes.iter().collect::<Vec<_>>());
    let args = ["--cluster-range-split-bytes", "64kb"];
    for n in &mut nodes {
        n.start_with(&list, &args);
    }
    find_leader(&nodes);
    wait_serving(&nodes);
    const WRITERS: usize = 3;
    const KEYS: usize = 300;
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.resp).collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|t| {
            let (addrs, stop) = (addrs.clone(), std::sync::Arc::clone(&stop));
            std::thread::spawn(move || {
                // Per key: (acknowledged, sent) rounds.
                let mut seen = vec![(0usize, 0usize); KEYS];
                let mut via = t;
                let mut con: Option<redis::Connection> = None;
                let mut round = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || round < 3 {
                    round += 1;
                    for (j, s) in seen.iter_mut().enumerate() {
                        let value = format!("{round:06}{}", "x".repeat(300));
                        s.1 = round;
                        let c = match &mut con {
                            Some(c) => c,
                            None => {
                                let client =
                                    redis::Client::open(format!("redis://{}/", addrs[via % 3]));
                                match client.and_then(|c| {
                                    c.get_connection_with_timeout(Duration::from_secs(1))
                                }) {
                                    Ok(c) => con.insert(c),
                                    Err(_) => {
                                        via += 1;
                                        std::thread::sleep(Duration::from_millis(50));
                                        continue;
                                    }
                                }
                            }
                        };
                        let _ = c.set_read_timeout(Some(Duration::from_secs(15)));
                        match redis::cmd("SET")
                            .arg(format!("key{j:04}-{t}"))
                            .arg(&value)
                            .query::<()>(c)
                        {
                            Ok(()) => s.0 = round,
                            Err(_) => {
                                con = None;
                                via += 1;
                            }
                        }
                    }
                }
                seen
            })
        })
        .collect();
    // Once the keyspace has split, node 3 is killed and started again.
    let wait_ranges = |nodes: &[Node], n: usize, within: u64| {
        let deadline = Instant::now() + Duration::from_secs(within);
        loop {
            let r = nodes[0].info_ranges();
            if field(&r, "ranges").parse::<usize>().unwrap_or(0) >= n {
                return;
            }
            assert!(Instant::now() < deadline, "fewer than {n} ranges: {r:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    wait_ranges(&nodes, 2, 120);
    nodes[2].kill();
    std::thread::sleep(Duration::from_secs(1));
    nodes[2].start_with(&list, &args);
    wait_serving(&nodes);
    wait_ranges(&nodes, 4, 120);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let seen: Vec<Vec<(usize, usize)>> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    for n in &nodes {
        let mut con = n.connect();
        for (t, keys) in seen.iter().enumerate() {
            for (j, &(acked, sent)) in keys.iter().enumerate() {
                let v: Option<String> = redis::cmd("GET")
                    .arg(format!("key{j:04}-{t}"))
                    .query(&mut con)
                    .unwrap();
                let got: usize = v.map_or(0, |v| v[..6].parse().unwrap());
                assert!(
                    got >= acked && got <= sent,
                    "node {}: key{j:04}-{t} is at round {got}, acknowledged {acked}, sent {sent}",
                    n.id
                );
            }
        }
    }
    drop(nodes);
    let _ = std::fs::remove_dir_all(&root);
}
