//! A range a snapshot pins does not split (`docs/cluster.md`, "Ranges"):
//! three `combkv serve` processes whose ranges split at 64 KB, the
//! keyspace split in two by hand. A snapshot pins both ranges (on one
//! range it is the store's own, which a split does not touch); writes
//! then take the second more than twice past the split size. While the
//! snapshot lasts the range stays whole and the snapshot reads as it was;
//! a split by hand is refused unless forced, and so is a merge by hand
//! (forced, the range split off takes the pins, and the snapshot still
//! reads as it was); once the snapshot is released, the range splits.

mod support;

use std::time::{Duration, Instant};

use support::node::{Node, admin, find_leader, peers, wait_serving};

/// Keys written before the snapshot, and after it.
const BEFORE: usize = 200;
const AFTER: usize = 1500;

fn key(i: usize) -> String {
    format!("key{i:05}")
}

#[test]
fn a_range_a_snapshot_pins_waits_to_split_until_it_is_released() {
    let root = support::node::root("ranges_pinned", "split");
    let mut nodes: Vec<Node> = (1..=3).map(|id| Node::new(&root, id)).collect();
    let all = peers(&nodes.iter().collect::<Vec<_>>());
    for n in &mut nodes {
        // One event loop: a request that held it would hold every client.
        // Node 1 reads what it has applied, so that a request's wait is
        // its own, never a read index's (see the last part).
        let reads = if n.id == 1 { "local" } else { "linearizable" };
        n.start_with(
            &all,
            &[
                "--cluster-range-split-bytes",
                "64kb",
                "--threads",
                "1",
                "--cluster-reads",
                reads,
            ],
        );
    }
    find_leader(&nodes);
    wait_serving(&nodes);
    let mut con = nodes[0].connect();
    let value = "v".repeat(100);
    for i in 0..BEFORE {
        let _: () = redis::cmd("SET")
            .arg(key(i))
            .arg(&value)
            .query(&mut con)
            .unwrap();
    }
    let (ok, said) = admin(
        &nodes[0],
        &["split", &key(BEFORE / 2)],
        Duration::from_secs(30),
    );
    assert!(ok, "{said}");
    let snap: i64 = redis::cmd("SNAPSHOT")
        .arg("CREATE")
        .arg("EX")
        .arg(120)
        .query(&mut con)
        .unwrap();
    // Past the split size more than twice over.
    for i in BEFORE..BEFORE + AFTER {
        let _: () = redis::cmd("SET")
            .arg(key(i))
            .arg(&value)
            .query(&mut con)
            .unwrap();
    }
    // The split drivers run every 100 ms; a range past its size splits
    // within a second when nothing holds it.
    std::thread::sleep(Duration::from_secs(3));
    for n in &nodes {
        assert_eq!(
            n.ranges_number("ranges"),
            2,
            "node {}: split while pinned",
            n.id
        );
    }
    // The snapshot reads as it was, through the node it was taken on (a
    // snapshot id is its node's).
    let at: Vec<String> = redis::cmd("RANGEAT")
        .arg(snap)
        .arg("-")
        .arg("+")
        .arg("KEYSONLY")
        .query(&mut con)
        .unwrap();
    assert_eq!(at, (0..BEFORE).map(key).collect::<Vec<_>>());
    let last: Option<String> = redis::cmd("GETAT")
        .arg(snap)
        .arg(key(BEFORE + AFTER - 1))
        .query(&mut con)
        .unwrap();
    assert_eq!(last, None, "a key written after the snapshot");
    // A split by hand is refused too, through any node, saying why.
    let (ok, said) = admin(
        &nodes[1],
        &["split", &key(BEFORE / 4)],
        Duration::from_secs(30),
    );
    assert!(!ok && said.contains("pinned by"), "{said}");
    // So is a merge by hand: the merged range's store would hold none of
    // the snapshot's past.
    let (ok, said) = admin(&nodes[2], &["merge", &key(0)], Duration::from_secs(30));
    assert!(!ok && said.contains("pinned by"), "{said}");
    for n in &nodes {
        assert_eq!(n.ranges_number("ranges"), 2, "node {}", n.id);
    }
    // Forced, it is carried out, and the range split off takes the pins
    // with it: the snapshot still reads as it was, its keys split off
    // read from the store they were split from.
    let (ok, said) = admin(
        &nodes[1],
        &["split", &key(BEFORE / 4), "--force"],
        Duration::from_secs(30),
    );
    assert!(ok, "{said}");
    for n in &nodes {
        let deadline = Instant::now() + Duration::from_secs(30);
        while n.ranges_number("ranges") < 3 {
            assert!(Instant::now() < deadline, "node {}: no third range", n.id);
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    for k in [0, BEFORE / 4 + 1, BEFORE - 1] {
        let read: Option<String> = redis::cmd("GETAT")
            .arg(snap)
            .arg(key(k))
            .query(&mut con)
            .unwrap();
        assert_eq!(read.as_deref(), Some(value.as_str()), "{}", key(k));
    }
    let after: Vec<String> = redis::cmd("RANGEAT")
        .arg(snap)
        .arg("-")
        .arg("+")
        .arg("KEYSONLY")
        .query(&mut con)
        .unwrap();
    assert_eq!(after, (0..BEFORE).map(key).collect::<Vec<_>>());
    let released: i64 = redis::cmd("SNAPSHOT")
        .arg("RELEASE")
        .arg(snap)
        .query(&mut con)
        .unwrap();
    assert_eq!(released, 1);
    // Released, every replica drops its pin and the range splits.
    let deadline = Instant::now() + Duration::from_secs(60);
    while nodes.iter().any(|n| n.ranges_number("ranges") < 4) {
        assert!(
            Instant::now() < deadline,
            "the range never split once released"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for n in &nodes {
        // Each range's replicas drop their pins as they apply its release.
        let deadline = Instant::now() + Duration::from_secs(30);
        while n.ranges_number("ranges_snapshot_pins") > 0 {
            assert!(Instant::now() < deadline, "node {} still pinned", n.id);
            std::thread::sleep(Duration::from_millis(100));
        }
        let count: u64 = redis::cmd("DBSIZE").query(&mut n.connect()).unwrap();
        assert_eq!(count as usize, BEFORE + AFTER, "node {}", n.id);
    }
    a_snapshot_being_pinned_leaves_the_loop_free(&nodes, &value);
    drop(nodes);
    let _ = std::fs::remove_dir_all(&root);
}

/// SNAPSHOT CREATE on a split keyspace does not hold the event loop it
/// came in on while the ranges pin its timestamp: with nodes 2 and 3
/// stopped (SIGSTOP) no range has a quorum, and node 1 answers PING
/// meanwhile on the same loop; once they run again the snapshot is made
/// and reads. (One that held the loop would hold the PING until then.
/// Node 1 reads locally: otherwise the SNAPSHOT would first park on the
/// read index every read on it waits for, and the test would not tell.)
fn a_snapshot_being_pinned_leaves_the_loop_free(nodes: &[Node], value: &str) {
    use std::io::Read;
    use std::net::TcpStream;
    use support::{read_until, resp_cmd};
    let connect = || {
        let s = TcpStream::connect(nodes[0].resp).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s
    };
    let (mut creating, mut ping) = (connect(), connect());
    for n in &nodes[1..] {
        n.pause(true);
    }
    let asked = Instant::now();
    resp_cmd(&mut creating, &[b"SNAPSHOT", b"CREATE", b"EX", b"60"]);
    std::thread::sleep(Duration::from_millis(500));
    ping.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    resp_cmd(&mut ping, &[b"PING"]);
    let mut buf = [0u8; 64];
    let pong = ping.read(&mut buf).map(|n| buf[..n].to_vec());
    let waiting = support::no_reply_yet(&mut creating);
    for n in &nodes[1..] {
        n.pause(false);
    }
    assert_eq!(
        pong.as_deref().ok(),
        Some(&b"+PONG\r\n"[..]),
        "PING waited behind a snapshot: {pong:?}"
    );
    assert!(waiting, "the snapshot answered with no quorum anywhere");
    let id = read_until(&mut creating, b"\r\n", Duration::from_secs(60));
    let id = String::from_utf8_lossy(&id);
    eprintln!("the snapshot answered {id:?} after {:?}", asked.elapsed());
    let id: i64 = id
        .strip_prefix(':')
        .and_then(|n| n.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("SNAPSHOT CREATE answered {id:?}"));
    let first: Option<String> = redis::cmd("GETAT")
        .arg(id)
        .arg(key(0))
        .query(&mut nodes[0].connect())
        .unwrap();
    assert_eq!(first.as_deref(), Some(value));
}
