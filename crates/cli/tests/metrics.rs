//! The metrics endpoint's exposition: valid Prometheus text (the
//! `prometheus-parse` crate reads every sample with its type), a HELP and
//! a TYPE line for every family, counters named `_total`, histograms with
//! cumulative buckets ending at `+Inf` = `_count`, and per-command counts
//! equal to what the test sent over RESP and memcached; INFO's
//! commandstats and errorstats say the same. The engine's duration
//! histograms (WAL fsyncs, checkpoints, merges) count what their counters
//! count, and a cluster node's proposal histogram every write it was sent.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use support::resp::{Client, Value};

fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    body.to_string()
}

/// The structure promtool checks: every sample belongs to a family with
/// one HELP and one TYPE line before it, names are Prometheus names, and
/// counters end in `_total`. Returns each family's type.
fn check_structure(body: &str) -> BTreeMap<String, String> {
    let mut types = BTreeMap::new();
    let mut helps = BTreeSet::new();
    let valid = |n: &str| {
        n.chars().enumerate().all(|(i, c)| {
            c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
        })
    };
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            assert!(helps.insert(name.to_string()), "two HELP lines for {name}");
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').unwrap();
            assert!(valid(name), "bad name {name}");
            assert!(helps.contains(name), "TYPE before HELP for {name}");
            if ty == "counter" {
                assert!(name.ends_with("_total"), "counter {name} without _total");
            }
            assert!(
                types.insert(name.to_string(), ty.to_string()).is_none(),
                "two TYPE lines for {name}"
            );
        } else if !line.is_empty() {
            let name = line.split(['{', ' ']).next().unwrap();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    name.strip_suffix(s)
                        .filter(|f| types.get(*f).is_some_and(|t| t == "histogram"))
                })
                .unwrap_or(name);
            assert!(types.contains_key(family), "sample {name} has no TYPE");
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
    types
}

#[test]
fn the_exposition_is_valid_and_counts_what_was_sent() {
    let metrics: SocketAddr = ([127, 0, 0, 1], support::free_port()).into();
    let server = support::Server::start(&["--metrics", &metrics.to_string()], None);
    let mut c = Client::connect(server.resp);
    for i in 0..5 {
        assert_eq!(
            c.cmd(&["SET", &format!("k{i}"), "v"]),
            Value::Simple("OK".into())
        );
    }
    for i in 0..7 {
        c.cmd(&["GET", &format!("k{i}")]);
    }
    // One refused (arity), one failed (not a number).
    assert!(matches!(c.cmd(&["INCR"]), Value::Error(_)));
    assert!(matches!(c.cmd(&["INCR", "k0"]), Value::Error(_)));
    let mut mc = TcpStream::connect(server.memcached).unwrap();
    mc.write_all(b"set m 0 0 1\r\nx\r\nget m\r\nget m nope\r\n")
        .unwrap();
    support::read_until(
        &mut mc,
        b"END\r\nVALUE m 0 1\r\nx\r\nEND\r\n",
        Duration::from_secs(5),
    );

    let body = scrape(metrics);
    let types = check_structure(&body);
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
        .expect("prometheus-parse reads the exposition");
    let sample = |metric: &str, labels: &[(&str, &str)]| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(|s| s.value.clone())
    };
    let count = |proto: &str, cmd: &str| match sample(
        "combkv_commands_total",
        &[("protocol", proto), ("cmd", cmd)],
    ) {
        Some(prometheus_parse::Value::Counter(v)) => v as u64,
        other => panic!("{proto} {cmd}: {other:?}"),
    };
    assert_eq!(count("resp", "set"), 5);
    assert_eq!(count("resp", "get"), 7);
    assert_eq!(count("resp", "incr"), 1, "the refused INCR did not run");
    assert_eq!(count("memcached", "set"), 1);
    assert_eq!(count("memcached", "get"), 2);
    let one = |m: &str| match sample(m, &[("protocol", "resp"), ("cmd", "incr")]) {
        Some(prometheus_parse::Value::Counter(v)) => v as u64,
        other => panic!("{m}: {other:?}"),
    };
    assert_eq!(one("combkv_command_rejected_total"), 1);
    assert_eq!(one("combkv_command_failed_total"), 1);
    assert_eq!(
        types
            .get("combkv_command_duration_seconds")
            .map(String::as_str),
        Some("histogram")
    );
    match sample(
        "combkv_command_duration_seconds",
        &[("protocol", "resp"), ("cmd", "get")],
    ) {
        Some(prometheus_parse::Value::Histogram(buckets)) => {
            let counts: Vec<f64> = buckets.iter().map(|b| b.count).collect();
            assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
            assert_eq!(buckets.last().unwrap().less_than, f64::INFINITY);
            assert_eq!(*counts.last().unwrap(), 7.0);
        }
        other => panic!("GET's histogram: {other:?}"),
    }
    for (name, ty) in [
        ("combkv_connections_received_total", "counter"),
        ("combkv_net_input_bytes_total", "counter"),
        ("combkv_errors_total", "counter"),
        ("combkv_connected_clients", "gauge"),
        ("combkv_used_memory_rss", "gauge"),
        ("combkv_ready", "gauge"),
        ("combkv_read_batch_size", "histogram"),
        ("combkv_wal_fsync_duration_seconds", "histogram"),
        ("combkv_checkpoint_duration_seconds", "histogram"),
        ("combkv_merge_duration_seconds", "histogram"),
    ] {
        assert_eq!(types.get(name).map(String::as_str), Some(ty), "{name}");
    }

    // No Raft on a single node: no proposal series.
    assert!(!types.contains_key("combkv_raft_proposal_duration_seconds"));
    // In memory: nothing fsynced or checkpointed, the histograms at zero.
    let parsed = Parsed::new(&body);
    assert_eq!(parsed.histogram("combkv_wal_fsync_duration_seconds").0, 0.0);
    assert_eq!(
        parsed.histogram("combkv_checkpoint_duration_seconds").0,
        0.0
    );
    let info = c.cmd(&["INFO", "persistence"]).text().unwrap();
    assert!(info.contains("rdb_last_bgsave_time_sec:-1\r\n"), "{info}");

    // Seven GETs, each its own batch (one request in flight at a time).
    match sample("combkv_read_batch_size", &[]) {
        Some(prometheus_parse::Value::Histogram(buckets)) => {
            let one = buckets.iter().find(|b| b.less_than == 1.0).unwrap();
            assert!(one.count >= 7.0, "{buckets:?}");
            assert_eq!(buckets.last().unwrap().less_than, f64::INFINITY);
        }
        other => panic!("batch sizes: {other:?}"),
    }

    // INFO says the same.
    let info = c.cmd(&["INFO", "commandstats"]).text().unwrap();
    assert!(
        info.contains("cmdstat_incr:calls=1,") && info.contains("rejected_calls=1,failed_calls=1"),
        "{info}"
    );
    assert!(info.contains("cmdstat_get:calls=7,"), "{info}");
    let errors = c.cmd(&["INFO", "errorstats"]).text().unwrap();
    assert!(errors.contains("errorstat_ERR:count=2"), "{errors}");
    let latency = c.cmd(&["INFO", "latencystats"]).text().unwrap();
    assert!(
        latency.contains("latency_percentiles_usec_get:p50="),
        "{latency}"
    );
    // CONFIG RESETSTAT zeroes them.
    assert_eq!(c.cmd(&["CONFIG", "RESETSTAT"]), Value::Simple("OK".into()));
    let info = c.cmd(&["INFO", "commandstats"]).text().unwrap();
    assert!(!info.contains("cmdstat_get"), "{info}");
}

/// The exposition parsed by `prometheus-parse`, after the structure check.
struct Parsed(prometheus_parse::Scrape);

impl Parsed {
    fn new(body: &str) -> Parsed {
        check_structure(body);
        Parsed(
            prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
                .expect("prometheus-parse reads the exposition"),
        )
    }

    /// The value of an unlabelled sample (a counter, or a histogram's
    /// `_count` or `_sum`).
    fn value(&self, metric: &str) -> f64 {
        let s = self.0.samples.iter().find(|s| s.metric == metric);
        match s.map(|s| &s.value) {
            Some(prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v)) => *v,
            other => panic!("{metric}: {other:?}"),
        }
    }

    /// An unlabelled histogram's (count, sum), once its buckets are checked:
    /// bounds rising to `+Inf`, counts cumulative, the last equal to
    /// `_count`.
    fn histogram(&self, name: &str) -> (f64, f64) {
        let buckets = match self.0.samples.iter().find(|s| s.metric == name) {
            Some(prometheus_parse::Sample {
                value: prometheus_parse::Value::Histogram(b),
                ..
            }) => b,
            other => panic!("{name}: {other:?}"),
        };
        assert!(buckets.len() > 2, "{name}: {buckets:?}");
        assert!(
            buckets.windows(2).all(|w| w[0].less_than < w[1].less_than),
            "{name}: bounds {buckets:?}"
        );
        assert!(
            buckets.windows(2).all(|w| w[0].count <= w[1].count),
            "{name}: not cumulative {buckets:?}"
        );
        let last = buckets.last().unwrap();
        assert_eq!(last.less_than, f64::INFINITY, "{name}");
        let count = self.value(&format!("{name}_count"));
        assert_eq!(last.count, count, "{name}: +Inf bucket is not _count");
        (count, self.value(&format!("{name}_sum")))
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("combkv-metrics-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    p
}

fn addr() -> SocketAddr {
    ([127, 0, 0, 1], support::free_port()).into()
}

#[test]
fn fsyncs_checkpoints_and_merges_are_timed_as_they_are_counted() {
    const ROUNDS: usize = 5;
    const KEYS: usize = 20;
    let dir = temp_dir("durable");
    let metrics = addr();
    let server = support::Server::start(
        &[
            "--metrics",
            &metrics.to_string(),
            "--data-dir",
            dir.to_str().unwrap(),
            "--durability",
            "always",
            "--log-level",
            "warn",
        ],
        None,
    );
    let mut c = Client::connect(server.resp);
    // A full checkpoint, then delta runs that rewrite every key: the chain
    // is soon due for a merge, which runs in the background.
    for round in 0..ROUNDS {
        for i in 0..KEYS {
            let v = format!("v{round}");
            assert_eq!(
                c.cmd(&["SET", &format!("k{i}"), &v]),
                Value::Simple("OK".into())
            );
        }
        assert_eq!(c.cmd(&["SAVE"]), Value::Simple("OK".into()));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let parsed = loop {
        let parsed = Parsed::new(&scrape(metrics));
        if parsed.histogram("combkv_merge_duration_seconds").0 > 0.0 {
            break parsed;
        }
        assert!(Instant::now() < deadline, "no merge timed");
        std::thread::sleep(Duration::from_millis(50));
    };

    // `always`: each SET, sent one at a time, waited for an fsync of its
    // own. The server is idle now, so the counter read in the same scrape
    // is the histogram's count.
    let (fsyncs, fsync_secs) = parsed.histogram("combkv_wal_fsync_duration_seconds");
    assert!(fsyncs >= (ROUNDS * KEYS) as f64, "{fsyncs} fsyncs timed");
    assert_eq!(fsyncs, parsed.value("combkv_wal_fsyncs_total"));
    assert!(fsync_secs > 0.0);
    let (saves, save_secs) = parsed.histogram("combkv_checkpoint_duration_seconds");
    assert!(saves >= ROUNDS as f64, "{saves} checkpoints timed");
    assert_eq!(saves, parsed.value("combkv_checkpoints_ok_total"));
    assert!(save_secs > 0.0);
    let (merges, _) = parsed.histogram("combkv_merge_duration_seconds");
    assert!(merges <= parsed.value("combkv_merges_ok_total"));
    // INFO has Redis's field for the last save's duration (-1 before one).
    let info = c.cmd(&["INFO", "persistence"]).text().unwrap();
    let secs: i64 = info
        .lines()
        .find_map(|l| l.strip_prefix("rdb_last_bgsave_time_sec:"))
        .unwrap_or_else(|| panic!("{info}"))
        .trim()
        .parse()
        .unwrap();
    assert!(secs >= 0, "{info}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Three nodes: a write sent to the leader is proposed there, one sent
/// to a follower is forwarded; either way the node the client asked times
/// it, once. Each SET is sent one at a time, so each is a proposal of its
/// own.
#[test]
fn cluster_nodes_time_every_proposal_they_answer() {
    const WRITES: usize = 10;
    let root = temp_dir("cluster");
    // (metrics, raft) of nodes 1, 2, 3, no two alike.
    let mut taken = BTreeSet::new();
    let mut fresh = || loop {
        let a = addr();
        if taken.insert(a) {
            return a;
        }
    };
    let nodes: Vec<(SocketAddr, SocketAddr)> = (0..3).map(|_| (fresh(), fresh())).collect();
    let peers: Vec<String> = nodes
        .iter()
        .enumerate()
        .map(|(i, (_, raft))| format!("{}={raft}", i + 1))
        .collect();
    let peers = peers.join(",");
    // Started side by side: a node answers PING only once a leader is
    // elected and it has caught up, which takes two of them.
    let servers: Vec<support::Server> = std::thread::scope(|s| {
        let started: Vec<_> = nodes
            .iter()
            .enumerate()
            .map(|(i, (metrics, raft))| {
                let (id, dir, peers) = (
                    (i + 1).to_string(),
                    root.join(format!("n{}", i + 1)),
                    &peers,
                );
                s.spawn(move || {
                    support::Server::start(
                        &[
                            "--metrics",
                            &metrics.to_string(),
                            "--data-dir",
                            dir.to_str().unwrap(),
                            "--node-id",
                            &id,
                            "--raft-addr",
                            &raft.to_string(),
                            "--peers",
                            peers,
                            "--log-level",
                            "warn",
                            "--durability",
                            "always",
                        ],
                        None,
                    )
                })
            })
            .collect();
        started.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (n, server) in servers.iter().enumerate() {
        let mut c = Client::connect(server.resp);
        for i in 0..WRITES {
            assert_eq!(
                c.cmd(&["SET", &format!("n{n}-k{i}"), "v"]),
                Value::Simple("OK".into())
            );
        }
    }
    let mut roles = Vec::new();
    for (server, (metrics, _)) in servers.iter().zip(&nodes) {
        let parsed = Parsed::new(&scrape(*metrics));
        let (proposals, secs) = parsed.histogram("combkv_raft_proposal_duration_seconds");
        assert!(proposals >= WRITES as f64, "{proposals} proposals timed");
        assert!(secs > 0.0);
        // Every node syncs its Raft log before it acknowledges an entry
        // (`always`): the leader's appends and each follower's.
        let (fsyncs, _) = parsed.histogram("combkv_raft_log_fsync_duration_seconds");
        assert!(fsyncs >= 1.0, "{fsyncs} Raft log fsyncs timed");
        let info = Client::connect(server.resp)
            .cmd(&["INFO", "replication"])
            .text()
            .unwrap();
        roles.extend(
            info.lines()
                .filter_map(|l| l.strip_prefix("raft_role:"))
                .map(str::to_string),
        );
    }
    // The writes took both paths: proposed by the leader, forwarded.
    assert!(roles.iter().any(|r| r == "leader"), "{roles:?}");
    assert!(roles.iter().any(|r| r == "follower"), "{roles:?}");
    drop(servers);
    let _ = std::fs::remove_dir_all(&root);
}
