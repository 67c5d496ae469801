//! Cluster nodes as `combkv serve` processes on loopback addresses (node
//! N at 127.0.0.N), and what tests ask of them: status, INFO ranges,
//! `combkv cluster` commands, leaders.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One node's addresses, files and process.
pub struct Node {
    pub id: u64,
    pub resp: SocketAddr,
    pub raft: SocketAddr,
    /// Where the other nodes reach its Raft port (`--raft-advertise`), if
    /// not at `raft`: a proxy that can cut it off.
    pub advertise: Option<SocketAddr>,
    pub dir: PathBuf,
    pub child: Option<Child>,
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn ip(id: u64) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, id as u8))
}

/// A port nothing listens on at node `id`'s address.
pub fn free_addr(id: u64) -> SocketAddr {
    SocketAddr::new(ip(id), super::free_port_on(ip(id)))
}

impl Node {
    pub fn new(root: &Path, id: u64) -> Node {
        Node {
            id,
            resp: free_addr(id),
            raft: free_addr(id),
            advertise: None,
            dir: root.join(format!("n{id}")),
            child: None,
        }
    }

    /// `combkv serve` for this node with `peers` (none if empty) and
    /// `extra` arguments; its log goes beside its data directory.
    pub fn command(&self, peers: &str, extra: &[&str]) -> Command {
        std::fs::create_dir_all(self.dir.parent().unwrap()).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.with_extension("log"))
            .unwrap();
        let mut cmd = Command::new(super::binary());
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
        if let Some(a) = self.advertise {
            cmd.args(["--raft-advertise", &a.to_string()]);
        }
        cmd
    }

    /// Starts the node and waits until it answers PING: with PONG, or
    /// with LOADING while it has no leader to catch up with (a node that
    /// waits to be added, or the first of a cluster's nodes to start).
    pub fn start(&mut self, peers: &str) {
        self.start_with(peers, &[]);
    }

    /// [`Node::start`] with `extra` arguments.
    pub fn start_with(&mut self, peers: &str, extra: &[&str]) {
        self.start_command(self.command(peers, extra));
    }

    /// [`Node::start`] with `cmd`, a [`Node::command`] the caller changed
    /// (its environment, say).
    pub fn start_command(&mut self, mut cmd: Command) {
        let child = cmd.spawn().expect("combkv starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        let wait = Duration::from_millis(500);
        while !super::ask(self.resp, b"PING\r\n", b"+PONG\r\n", wait)
            && !super::ask(self.resp, b"PING\r\n", b"-LOADING", wait)
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
    pub fn refused_start(&self, peers: &str) -> String {
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

    /// Where the other nodes reach its Raft port.
    pub fn raft_reached_at(&self) -> SocketAddr {
        self.advertise.unwrap_or(self.raft)
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// Stops the process where it stands (SIGSTOP), or lets it run on
    /// (SIGCONT): a node that neither answers nor closes its connections.
    pub fn pause(&self, stopped: bool) {
        let pid = self.child.as_ref().expect("a running node").id();
        let sig = if stopped {
            libc::SIGSTOP
        } else {
            libc::SIGCONT
        };
        // SAFETY: a signal to a child this test started and has not reaped.
        let sent = unsafe { libc::kill(pid as libc::pid_t, sig) };
        assert_eq!(sent, 0, "signal {sig} to node {}", self.id);
    }

    /// Sends SIGTERM; how long the process took to exit (None: not within
    /// `within`, and it is then killed).
    pub fn terminate(&mut self, within: Duration) -> Option<Duration> {
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

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.with_extension("log")).unwrap_or_default();
        text[text.len().saturating_sub(3000)..].to_string()
    }

    pub fn connect(&self) -> redis::Connection {
        let c = redis::Client::open(format!("redis://{}/", self.resp)).unwrap();
        let con = c
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap();
        con.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        con
    }

    /// `INFO replication` (and `CLUSTER STATUS`'s extra lines) as fields.
    pub fn status(&self) -> BTreeMap<String, String> {
        self.try_status()
            .unwrap_or_else(|| panic!("node {} does not answer", self.id))
    }

    /// `INFO ranges` as fields (asked again while the node loads).
    pub fn info_ranges(&self) -> BTreeMap<String, String> {
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

    /// `INFO ranges`'s field `name`, as a number.
    pub fn ranges_number(&self, name: &str) -> u64 {
        let info = self.info_ranges();
        info.get(name)
            .unwrap_or_else(|| panic!("node {}: INFO ranges has no {name}: {info:?}", self.id))
            .parse()
            .unwrap()
    }

    /// [`Node::status`], None if the node does not answer.
    pub fn try_status(&self) -> Option<BTreeMap<String, String>> {
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
    pub fn wait_status(
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

    pub fn is_leader(&self) -> BTreeMap<String, String> {
        self.wait_status("the leader", Duration::from_secs(30), |s| {
            s.get("raft_role").map(String::as_str) == Some("leader")
        })
    }
}

/// The node that leads, once one of `nodes` says it does.
pub fn find_leader(nodes: &[Node]) -> &Node {
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
pub fn peers(nodes: &[&Node]) -> String {
    nodes
        .iter()
        .map(|n| format!("{}={}", n.id, n.raft_reached_at()))
        .collect::<Vec<_>>()
        .join(",")
}

/// Waits for `child` to exit within `within` (killed and failed if not).
pub fn wait_output(mut child: Child, within: Duration) -> std::process::Output {
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
pub fn admin(via: &Node, args: &[&str], within: Duration) -> (bool, String) {
    let child = Command::new(super::binary())
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
pub fn ranges(node: &Node) -> String {
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

/// A fresh directory for test `name` of test binary `binary`.
pub fn root(binary: &str, name: &str) -> PathBuf {
    let r = std::env::temp_dir().join(format!("combkv-{binary}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&r);
    r
}

pub fn set(node: &Node, key: &str) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("v")
        .query(&mut node.connect())
        .unwrap_or_else(|e| panic!("SET {key} through node {}: {e}", node.id));
}

/// `INFO replication`'s field `name`, empty if the node has none.
pub fn field<'a>(s: &'a BTreeMap<String, String>, name: &str) -> &'a str {
    s.get(name).map_or("", String::as_str)
}

/// Waits until every node of `nodes` answers PING with PONG (a cluster
/// node answers LOADING until it has caught up with its leader).
pub fn wait_serving(nodes: &[Node]) {
    for n in nodes {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !super::ask(
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
