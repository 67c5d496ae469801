//! The metrics endpoint's exposition: valid Prometheus text (the
//! `prometheus-parse` crate reads every sample with its type), a HELP and
//! a TYPE line for every family, counters named `_total`, histograms with
//! cumulative buckets ending at `+Inf` = `_count`, and per-command counts
//! equal to what the test sent over RESP and memcached; INFO's
//! commandstats and errorstats say the same.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

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
    ] {
        assert_eq!(types.get(name).map(String::as_str), Some(ty), "{name}");
    }

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
