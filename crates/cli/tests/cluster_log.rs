//! A cluster node's Raft log, tried through `combkv serve` processes:
//!
//! - `memory_and_disk_stay_bounded_by_the_data_not_the_bytes_written`: three
//!   nodes with the log's settings scaled down (a snapshot every 4 MiB of
//!   log, 50 entries kept behind it, a 1 MiB cache) take twenty times that
//!   (80 MiB of SETs) over 400 keys (1.6 MiB of data); each node's resident
//!   size grows by far less than what was written, and its data directory
//!   stays within a few snapshots' worth. Before, every entry stayed in
//!   memory and on disk until a snapshot every 100,000 entries: each node
//!   grew by more than the 80 MiB written, in memory and on disk.
//! - `a_node_refuses_to_start_on_a_log_damaged_below_what_was_synced`: one
//!   byte flipped in the middle of the last log segment of a one-node
//!   cluster, where the entries were synced (acknowledged): the node exits
//!   at once, naming the file and the offset. Before, the damage was cut as
//!   a torn tail and the node started without the entries after it.

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One `combkv serve` cluster node, killed on drop.
struct Node {
    id: u64,
    resp: SocketAddr,
    raft: SocketAddr,
    dir: PathBuf,
    child: Option<Child>,
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn addr() -> SocketAddr {
    ([127, 0, 0, 1], support::free_port()).into()
}

impl Node {
    fn new(id: u64, root: &Path) -> Node {
        Node {
            id,
            resp: addr(),
            raft: addr(),
            dir: root.join(format!("n{id}")),
            child: None,
        }
    }

    fn command(&self, peers: &str, extra: &[&str]) -> Command {
        let mut cmd = Command::new(support::binary());
        cmd.args(["serve", "--node-id", &self.id.to_string()])
            .args(["--raft-addr", &self.raft.to_string()])
            .args(["--peers", peers])
            .args(["--resp", &self.resp.to_string()])
            .args(["--memcached", "off"])
            .args(["--data-dir", self.dir.to_str().unwrap()])
            .args(["--log-level", "warn"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        cmd
    }

    fn start(&mut self, peers: &str, extra: &[&str]) {
        let child = self
            .command(peers, extra)
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

    fn con(&self) -> redis::Connection {
        let c = redis::Client::open(format!("redis://{}/", self.resp)).unwrap();
        let con = c
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap();
        con.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        con
    }

    /// The node's INFO replication fields, once it answers.
    fn replication(&self) -> std::collections::BTreeMap<String, String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = redis::Client::open(format!("redis://{}/", self.resp))
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
                .and_then(|mut c| {
                    redis::cmd("INFO")
                        .arg("replication")
                        .query::<String>(&mut c)
                });
            if let Ok(text) = got {
                return text
                    .lines()
                    .filter_map(|l| l.split_once(':'))
                    .map(|(k, v)| (k.to_string(), v.trim().to_string()))
                    .collect();
            }
            assert!(
                Instant::now() < deadline,
                "node {} does not answer",
                self.id
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Resident size in bytes.
    fn rss(&self) -> u64 {
        let pid = self.child.as_ref().expect("running").id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect("VmRSS")
            * 1024
    }
}

/// The bytes of every file under `dir` (what `du -sb` counts, less the
/// directories themselves).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(_) => e.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

/// The node the others agree leads, by INFO replication.
fn leader(nodes: &[Node]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let leads: Vec<String> = nodes
            .iter()
            .map(|n| {
                n.replication()
                    .get("raft_leader_id")
                    .cloned()
                    .unwrap_or_default()
            })
            .collect();
        // And serving: a node knows it leads a moment before it stops
        // answering LOADING (its readiness is checked on a timer).
        if let Some(i) = nodes
            .iter()
            .position(|n| leads.iter().all(|l| *l == n.id.to_string()))
            && support::ask(
                nodes[i].resp,
                b"PING\r\n",
                b"+PONG\r\n",
                Duration::from_millis(500),
            )
        {
            return i;
        }
        assert!(Instant::now() < deadline, "no leader: {leads:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Writes `bytes` of `value_len`-byte values over `keys` keys through
/// `node`, from eight connections pipelining 16 SETs each.
fn write(node: &Node, keys: u64, value_len: usize, bytes: u64) {
    let per_thread = bytes / value_len as u64 / 8;
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let mut con = node.con();
            std::thread::spawn(move || {
                let value = vec![b'a' + t as u8; value_len];
                let mut i = 0;
                while i < per_thread {
                    let mut p = redis::pipe();
                    for _ in 0..16.min(per_thread - i) {
                        p.cmd("SET")
                            .arg(format!("k{}", (i * 8 + t) % keys))
                            .arg(&value)
                            .ignore();
                        i += 1;
                    }
                    p.query::<()>(&mut con).expect("SET");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

const SNAPSHOT_LOG_BYTES: u64 = 4 << 20;
const KEYS: u64 = 400;
const VALUE: usize = 4096;

#[test]
fn memory_and_disk_stay_bounded_by_the_data_not_the_bytes_written() {
    let root = std::env::temp_dir().join(format!("combkv-cluster-log-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mut nodes: Vec<Node> = (1..=3).map(|id| Node::new(id, &root)).collect();
    let peers = nodes
        .iter()
        .map(|n| format!("{}={}", n.id, n.raft))
        .collect::<Vec<_>>()
        .join(",");
    let settings = [
        "--cluster-snapshot-log-bytes",
        "4mb",
        "--cluster-log-keep-entries",
        "50",
        "--cluster-log-cache-bytes",
        "1mb",
    ];
    for n in &mut nodes {
        n.start(&peers, &settings);
    }
    let lead = leader(&nodes);
    let data = KEYS * VALUE as u64;
    // Every key written once, and one interval's worth more: the store
    // and the process are at their working size.
    write(&nodes[lead], KEYS, VALUE, data + SNAPSHOT_LOG_BYTES);
    let before: Vec<u64> = nodes.iter().map(Node::rss).collect();
    let written = 20 * SNAPSHOT_LOG_BYTES;
    let started = Instant::now();
    write(&nodes[lead], KEYS, VALUE, written);
    eprintln!(
        "wrote {} MiB in {:.1} s",
        written >> 20,
        started.elapsed().as_secs_f64()
    );
    // Every node has applied it all (and its last snapshot is done).
    let last = nodes[lead].replication()["raft_last_log_index"].clone();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !nodes
        .iter()
        .all(|n| n.replication()["raft_applied_index"] == last)
    {
        assert!(Instant::now() < deadline, "the nodes did not catch up");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    // The data (values and keys), a snapshot of it, the log since the
    // last snapshot and the entries kept behind it, a segment's slack, and
    // the node's journal (a file retired at 4 MiB, zeroed 1 MiB ahead).
    let disk_bound = 2 * data + 3 * SNAPSHOT_LOG_BYTES + (8 << 20) + (5 << 20);
    // The cache, the log settings' worth of entries in flight, and what
    // building a snapshot and the allocator hold: far below what was written.
    let rss_bound = written / 3;
    let mut report = Vec::new();
    for (n, before) in nodes.iter().zip(&before) {
        let r = n.replication();
        let (rss, disk) = (n.rss(), dir_bytes(&n.dir));
        report.push(format!(
            "node {}: rss {} -> {} MiB, data dir {} MiB, snapshot at {} of {}",
            n.id,
            before >> 20,
            rss >> 20,
            disk >> 20,
            r["raft_snapshot_index"],
            r["raft_last_log_index"],
        ));
        assert!(
            r["raft_snapshot_index"] != "0",
            "node {}: no snapshot was taken\n{}",
            n.id,
            report.join("\n")
        );
        assert!(
            disk < disk_bound,
            "node {}: {} MiB on disk, over {} MiB\n{}",
            n.id,
            disk >> 20,
            disk_bound >> 20,
            report.join("\n")
        );
        assert!(
            rss.saturating_sub(*before) < rss_bound,
            "node {}: resident size grew by {} MiB writing {} MiB, over {} MiB\n{}",
            n.id,
            rss.saturating_sub(*before) >> 20,
            written >> 20,
            rss_bound >> 20,
            report.join("\n")
        );
    }
    eprintln!("{}", report.join("\n"));
    drop(nodes);
    let _ = std::fs::remove_dir_all(&root);
}

/// Where the records of a segment end (a zero header or the file's end).
fn records_end(bytes: &[u8]) -> usize {
    let mut at = 0;
    while at + 8 <= bytes.len() && bytes[at..at + 8] != [0; 8] {
        at += 8 + u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    }
    at.min(bytes.len())
}

#[test]
fn a_node_refuses_to_start_on_a_log_damaged_below_what_was_synced() {
    let root =
        std::env::temp_dir().join(format!("combkv-cluster-log-damage-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mut node = Node::new(1, &root);
    let peers = format!("1={}", node.raft);
    node.start(&peers, &[]);
    leader(std::slice::from_ref(&node));
    write(&node, 200, 1000, 2 << 20);
    // The log syncs its segment a second after appends its node's journal
    // synced, and records what it synced within a tenth of a second (a
    // second of slack on a loaded machine: short of it, the damage would
    // be taken for a torn tail and mended from the journal).
    std::thread::sleep(Duration::from_millis(2500));
    node.kill();
    let log = node.dir.join("cluster").join("log");
    let mut segments: Vec<PathBuf> = std::fs::read_dir(&log)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    segments.sort();
    let last = segments.last().expect("a segment");
    let mut bytes = std::fs::read(last).unwrap();
    let end = records_end(&bytes);
    assert!(
        end > 100_000,
        "only {end} bytes of records in {}",
        last.display()
    );
    bytes[end / 2] ^= 0x20;
    std::fs::write(last, &bytes).unwrap();
    let out = node
        .command(&peers, &[])
        .stderr(Stdio::piped())
        .spawn()
        .expect("combkv starts");
    let started = Instant::now();
    let mut child = out;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the node started on a log damaged below what was synced");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    let name = last.file_name().unwrap().to_str().unwrap();
    for part in ["the Raft log is corrupt", name, "at byte", "synced"] {
        assert!(stderr.contains(part), "{part:?} not in {stderr:?}");
    }
    // Nothing was cut.
    assert_eq!(std::fs::read(last).unwrap(), bytes);
    drop(node);
    let _ = std::fs::remove_dir_all(&root);
}
