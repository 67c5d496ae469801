//! MEMORY USAGE, STATS, DOCTOR and HELP: the errors and shapes Redis 7.0
//! answers, compared with a redis-server; the sizes combkv reports are
//! its own store's (an item's encoded bytes and out-of-line value), so
//! they are checked against what the engine stores, and `redis-cli
//! --memkeys` must report the same sizes as MEMORY USAGE.

mod support;

use std::process::Command;

use support::Server;
use support::resp::{Beside, Client, Value, redis_installed};

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        other => panic!("not an integer: {other:?}"),
    }
}

/// The names of a MEMORY STATS reply (a map, an array in RESP2).
fn stat_names(v: &Value) -> Vec<String> {
    let Value::Array(items) = v else {
        panic!("MEMORY STATS: {v:?}")
    };
    items
        .chunks(2)
        .map(|kv| kv[0].text().expect("a field name"))
        .collect()
}

#[test]
fn errors_and_shapes_match_redis() {
    // The servers are bound too: they stop when the test ends.
    let Some(Beside {
        redis: _redis,
        combkv: _combkv,
        mut r,
        mut c,
    }) = Beside::start()
    else {
        return;
    };
    for cl in [&mut r, &mut c] {
        assert_eq!(cl.cmd(&["SET", "k", "v"]), Value::Simple("OK".into()));
    }
    let steps: &[&[&str]] = &[
        &["MEMORY", "USAGE", "nope"],
        &["MEMORY", "USAGE", "k", "SAMPLES", "x"],
        &["MEMORY", "USAGE", "k", "SAMPLES", "-1"],
        &["MEMORY", "USAGE", "k", "SAMPLES"],
        &["MEMORY", "USAGE", "k", "FOO", "1"],
        &["MEMORY", "USAGE", "nope", "SAMPLES", "0"],
        &["MEMORY", "USAGE"],
        &["MEMORY", "STATS", "x"],
        &["MEMORY", "DOCTOR", "x"],
        &["MEMORY", "HELP", "x"],
        &["MEMORY", "FOO"],
        &["MEMORY"],
        // Both are under 5 MB.
        &["MEMORY", "DOCTOR"],
    ];
    for step in steps {
        assert_eq!(c.cmd(step), r.cmd(step), "{step:?}");
    }
    assert!(int(&c.cmd(&["MEMORY", "USAGE", "k", "SAMPLES", "0"])) > 0);
    // combkv's STATS fields are Redis's names, in Redis's order.
    let theirs = stat_names(&r.cmd(&["MEMORY", "STATS"]));
    let ours = stat_names(&c.cmd(&["MEMORY", "STATS"]));
    let mut at = 0;
    for name in &ours {
        let i = theirs[at..]
            .iter()
            .position(|t| t == name)
            .unwrap_or_else(|| panic!("{name} is not Redis's, or out of its order: {theirs:?}"));
        at += i + 1;
    }
    assert!(ours.len() >= 14, "{ours:?}");
}

/// MEMORY USAGE counts the key, the value and the item's overhead as the
/// engine stores it; STATS adds up; `redis-cli --memkeys` agrees.
#[test]
fn usage_is_what_the_store_holds() {
    let server = Server::start(&[], None);
    let mut c = Client::connect(server.resp);
    let big = "x".repeat(5000);
    let mid = "y".repeat(300);
    for (k, v) in [("small", "v"), ("mid", mid.as_str()), ("big", big.as_str())] {
        assert_eq!(c.cmd(&["SET", k, v]), Value::Simple("OK".into()));
    }
    let usage = |c: &mut Client, k: &str| int(&c.cmd(&["MEMORY", "USAGE", k]));
    let small = usage(&mut c, "small");
    // The 15-byte item header, the key and the value, and at most the log
    // extras (back pointer, order hint, directory entry).
    assert!((15 + 5 + 1..=15 + 5 + 1 + 11).contains(&small), "{small}");
    let m = usage(&mut c, "mid");
    assert_eq!(
        m - small,
        300 - 1 + 3 - 5,
        "an inline value counts its bytes"
    );
    // Out of line: the value's allocation, with its header, is counted.
    let b = usage(&mut c, "big");
    assert!(b > 5000 && b < 5000 + 200, "{b}");
    assert_eq!(c.cmd(&["MEMORY", "USAGE", "gone"]), Value::NilBulk);
    // TTL and flags add their bytes.
    assert_eq!(
        c.cmd(&["SET", "small", "v", "EX", "100"]),
        Value::Simple("OK".into())
    );
    assert_eq!(usage(&mut c, "small"), small + 8);

    let stats = c.cmd(&["MEMORY", "STATS"]);
    let Value::Array(items) = &stats else {
        panic!("{stats:?}")
    };
    let get = |name: &str| {
        items
            .chunks(2)
            .find(|kv| kv[0].text().as_deref() == Some(name))
            .map(|kv| kv[1].clone())
            .unwrap_or_else(|| panic!("no {name}"))
    };
    assert_eq!(int(&get("keys.count")), 3);
    let total = int(&get("total.allocated"));
    let overhead = int(&get("overhead.total"));
    assert_eq!(
        overhead,
        int(&get("startup.allocated")) + int(&get("clients.normal"))
    );
    assert_eq!(int(&get("dataset.bytes")), total - overhead);
    assert!(int(&get("peak.allocated")) >= total);

    if !redis_installed() {
        return;
    }
    let out = Command::new("redis-cli")
        .args(["-p", &server.resp.port().to_string(), "--memkeys"])
        .output()
        .expect("redis-cli runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("Biggest string found '\"big\"' has {b} bytes")),
        "{text}"
    );
    let sum = usage(&mut c, "small") + m + b;
    assert!(
        text.contains(&format!("3 strings with {sum} bytes")),
        "{text}"
    );
}
