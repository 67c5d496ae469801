//! Reads across ranges on a node whose clock is off (`docs/cluster.md`,
//! "Reads across ranges and the nodes' clocks"): three `combkv serve`
//! processes on loopback, node 3 started with libfaketime preloaded so
//! that its wall clock reads 200 ms off the host's, and the keyspace split
//! into two ranges.
//!
//! Node 3 behind: a client writes a key through node 1 and, once the
//! write is acknowledged, reads it with MGET across both ranges through
//! node 3, whose read takes its timestamp from its own clock.
//! - With `--cluster-max-clock-offset 0` the offset shows: some reads miss
//!   the write they follow (or cannot be served at so old a timestamp), and
//!   node 3 counts entries from clocks ahead of its own past the bound.
//!   That half checks the test itself: without it, a preload that did
//!   nothing would pass the other half.
//! - With a bound above the offset, every read sees the write before it,
//!   and node 3 counts no entry past the bound.
//!
//! Nodes set to different bounds apply the largest (each publishes its
//! own through the log), so a leader set to none still waits out the
//! bound node 3 needs.
//!
//! Node 3 ahead by more than the bound: its reads across ranges are
//! refused (their read floors would put the ranges' versions past every
//! node's commit wait), its writes are taken at their leader's clock and
//! read back through node 1, and the leaders count its proposals.

mod support;

use std::time::{Duration, Instant};

use support::node::{Node, admin, find_leader, peers, wait_serving};

/// How far behind node 3's clock runs, s (libfaketime's `FAKETIME`).
const BEHIND: &str = "-0.2";
/// And how far ahead, in the last case.
const AHEAD: &str = "+0.2";
/// A bound above that offset, ms.
const BOUND: u64 = 250;
/// Writes, each followed by a read across ranges.
const ROUNDS: usize = 20;

/// Three nodes with the bounds `bounds_ms` (node 1's first), node 3's
/// clock set `off` s off by libfaketime (`lib`), the keyspace split at `m`
/// and both ranges hosted on every node; the nodes and their directory.
fn start(lib: &str, bounds_ms: [u64; 3], off: &str) -> (std::path::PathBuf, Vec<Node>) {
    let name = format!(
        "bound{}-{}-{}{off}",
        bounds_ms[0], bounds_ms[1], bounds_ms[2]
    );
    let root = support::node::root("clock_offset", &name);
    let mut nodes: Vec<Node> = (1..=3).map(|id| Node::new(&root, id)).collect();
    let all = peers(&nodes.iter().collect::<Vec<_>>());
    let bounds = bounds_ms.map(|b| b.to_string());
    let args = |i: usize| ["--cluster-max-clock-offset", bounds[i].as_str()];
    // Nodes 1 and 2 first: they elect group 0's leader, and the range a
    // split makes stands its parent's leader first, so node 3 (the one
    // behind) leads neither range. Were it to lead the range of `z`, its
    // own apply would wait for its clock to reach the write's version, and
    // a commit wait that leaves the bound out would pass here too.
    for (i, n) in nodes[..2].iter_mut().enumerate() {
        n.start_with(&all, &args(i));
    }
    find_leader(&nodes[..2]);
    let mut behind = nodes[2].command(&all, &args(2));
    behind
        .env("LD_PRELOAD", lib)
        .env("FAKETIME", off)
        // Only the wall clock: timers and timeouts run as on the others.
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    nodes[2].start_command(behind);
    wait_serving(&nodes);
    let (ok, said) = admin(&nodes[0], &["split", "m"], Duration::from_secs(30));
    assert!(ok, "{said}");
    for n in &nodes {
        let deadline = Instant::now() + Duration::from_secs(30);
        while n.info_ranges().get("ranges_hosted").map(String::as_str) != Some("2") {
            assert!(
                Instant::now() < deadline,
                "node {} never hosted both ranges",
                n.id
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // Every node applies the largest bound, once the others' published
    // settings have reached it through the log.
    let largest = bounds_ms.into_iter().max().unwrap_or(0);
    for n in &nodes {
        let deadline = Instant::now() + Duration::from_secs(30);
        while n.ranges_number("ranges_clock_offset_ms") != largest {
            assert!(
                Instant::now() < deadline,
                "node {} never applied the largest bound, {largest} ms",
                n.id
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    (root, nodes)
}

/// What `ROUNDS` writes through node 1, each read back across ranges
/// through node 3 (its clock behind), came to with the bounds `bounds_ms`:
/// reads that missed the write before them or were refused, and node 3's
/// INFO fields `ranges_clock_ahead_max_ms` and
/// `ranges_clock_ahead_past_bound`.
fn run(lib: &str, bounds_ms: [u64; 3]) -> (Vec<String>, u64, u64) {
    let (root, nodes) = start(lib, bounds_ms, BEHIND);
    let mut writer = nodes[0].connect();
    let mut reader = nodes[2].connect();
    query::<()>(&mut writer, redis::cmd("SET").arg("a").arg("0")).unwrap();
    let leading = nodes[2].info_ranges().get("ranges_leading").cloned();
    if leading.as_deref() != Some("0") {
        eprintln!("node 3 leads {leading:?} ranges: an election moved a leader");
    }
    let mut missed = Vec::new();
    for i in 0..ROUNDS {
        query::<()>(&mut writer, redis::cmd("SET").arg("z").arg(i))
            .unwrap_or_else(|e| panic!("SET z {i}: {e}"));
        match query::<Vec<Option<String>>>(&mut reader, redis::cmd("MGET").arg("a").arg("z")) {
            Ok(got) if got == [Some("0".to_string()), Some(i.to_string())] => {}
            Ok(got) => missed.push(format!("after SET z {i}: {got:?}")),
            Err(e) => missed.push(format!("after SET z {i}: {e}")),
        }
    }
    let seen = (
        nodes[2].ranges_number("ranges_clock_ahead_max_ms"),
        nodes[2].ranges_number("ranges_clock_ahead_past_bound"),
    );
    drop(nodes);
    let _ = std::fs::remove_dir_all(&root);
    (missed, seen.0, seen.1)
}

/// `cmd` on `con`, sent again while the cluster answers that it cannot
/// yet (a group just split off electing its leader, a map catching up):
/// only answers are checked.
fn query<T: redis::FromRedisValue>(
    con: &mut redis::Connection,
    cmd: &redis::Cmd,
) -> redis::RedisResult<T> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match cmd.query(con) {
            Err(e)
                if matches!(e.code(), Some("CLUSTERDOWN" | "TRYAGAIN"))
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

#[test]
fn reads_across_ranges_on_a_node_behind_see_every_acknowledged_write_within_the_bound() {
    // libfaketime's preload library.
    let Some(lib) = support::peer_tool(&["tool", "libfaketime"]) else {
        return;
    };
    let (missed, ahead, past) = run(&lib, [0; 3]);
    eprintln!("no bound: ahead {ahead} ms, {past} entries past it, missed {missed:#?}");
    assert!(
        !missed.is_empty(),
        "with no bound, node 3 running {BEHIND} s behind missed no write: the preload had no effect"
    );
    assert!(
        ahead >= 100 && past > 0,
        "no bound: ahead {ahead} ms, {past} entries past it"
    );
    let (missed, ahead, past) = run(&lib, [BOUND; 3]);
    assert!(missed.is_empty(), "bound {BOUND} ms: {missed:#?}");
    assert!(
        ahead >= 100 && past == 0,
        "bound {BOUND} ms: ahead {ahead} ms, {past} entries past it"
    );
}

/// Nodes 1 and 2, which lead both ranges, are set to no bound, and node 3
/// (behind) to one above its offset: the leaders apply node 3's, published
/// through the log, and its reads see every write. Applying their own
/// setting, they would not wait at all, and node 3's reads would miss
/// writes as with no bound anywhere (the test above).
#[test]
fn nodes_set_to_different_bounds_apply_the_largest() {
    let Some(lib) = support::peer_tool(&["tool", "libfaketime"]) else {
        return;
    };
    let (missed, ahead, past) = run(&lib, [0, 0, BOUND]);
    assert!(missed.is_empty(), "bounds 0, 0 and {BOUND} ms: {missed:#?}");
    assert!(
        ahead >= 100 && past == 0,
        "bounds 0, 0 and {BOUND} ms: ahead {ahead} ms, {past} entries past it"
    );
}

#[test]
fn a_node_whose_clock_runs_ahead_past_the_bound_is_refused_its_reads_across_ranges() {
    let Some(lib) = support::peer_tool(&["tool", "libfaketime"]) else {
        return;
    };
    let (root, nodes) = start(&lib, [50; 3], AHEAD);
    let mut ahead = nodes[2].connect();
    let mut other = nodes[0].connect();
    // Its writes are taken, at their leader's clock, and read back
    // across ranges through a node whose clock is right.
    query::<()>(&mut ahead, redis::cmd("SET").arg("a").arg("1")).unwrap();
    query::<()>(&mut ahead, redis::cmd("SET").arg("z").arg("2")).unwrap();
    let got: Vec<Option<String>> = query(&mut other, redis::cmd("MGET").arg("a").arg("z")).unwrap();
    assert_eq!(got, [Some("1".to_string()), Some("2".to_string())]);
    // Its own reads across ranges are refused, saying why.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let read: redis::RedisResult<Vec<Option<String>>> =
            redis::cmd("MGET").arg("a").arg("z").query(&mut ahead);
        match read {
            Err(e) if e.to_string().contains("synchronise this node's clock") => break,
            other => assert!(Instant::now() < deadline, "node 3, 200 ms ahead: {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let past: u64 = nodes[..2]
        .iter()
        .map(|n| n.ranges_number("ranges_clock_ahead_past_bound"))
        .sum();
    assert!(past > 0, "the leaders counted none of node 3's proposals");
    drop(nodes);
    let _ = std::fs::remove_dir_all(&root);
}
