//! combkv's ordered and versioned reads: RANGE FLOOR CEIL SNAPSHOT GETAT
//! RANGEAT (`docs/protocol.md`).

use crate::wire::*;

fn fill(c: &mut Conn) {
    c.ok("MSET b 2 d 4 f 6 h 8", OK);
}

/// `k1 v1 k2 v2 ...` as a flat array.
fn pairs(items: &[(&str, &str)]) -> String {
    let flat: Vec<&str> = items.iter().flat_map(|(k, v)| [*k, *v]).collect();
    bulks(&flat)
}

#[test]
fn range_bounds_limit_rev_keysonly() {
    let s = server();
    let mut c = s.connect();
    c.ok("RANGE - +", "*0\r\n");
    fill(&mut c);
    let all = pairs(&[("b", "2"), ("d", "4"), ("f", "6"), ("h", "8")]);
    c.ok("RANGE - +", &all);
    c.ok("RANGE [b [h", &all);
    c.ok("RANGE (b (h", &pairs(&[("d", "4"), ("f", "6")]));
    c.ok("RANGE [c [f", &pairs(&[("d", "4"), ("f", "6")]));
    c.ok("RANGE [c (f", &pairs(&[("d", "4")]));
    c.ok("RANGE [e +", &pairs(&[("f", "6"), ("h", "8")]));
    c.ok("RANGE - (d", &pairs(&[("b", "2")]));
    // Empty and inverted ranges.
    c.ok("RANGE [x +", "*0\r\n");
    c.ok("RANGE [f [b", "*0\r\n");
    c.ok("RANGE + -", "*0\r\n");
    c.ok("RANGE + +", "*0\r\n");
    c.ok("RANGE - -", "*0\r\n");
    c.ok("RANGE [d (d", "*0\r\n");
    // `[` and `(` with no key: below every key.
    c.ok("RANGE [ +", &all);
    c.ok("RANGE - [", "*0\r\n");
    // LIMIT, REV (bounds still low first), options in any order and case.
    c.ok("RANGE - + LIMIT 2", &pairs(&[("b", "2"), ("d", "4")]));
    c.ok("RANGE - + LIMIT 0", "*0\r\n");
    c.ok("RANGE - + LIMIT -1", &all);
    c.ok(
        "RANGE - + REV",
        &pairs(&[("h", "8"), ("f", "6"), ("d", "4"), ("b", "2")]),
    );
    c.ok("RANGE [c + rev limit 2", &pairs(&[("h", "8"), ("f", "6")]));
    c.ok("RANGE - (f LIMIT 1 REV", &pairs(&[("d", "4")]));
    c.ok("RANGE - + KEYSONLY", &bulks(&["b", "d", "f", "h"]));
    c.ok("RANGE - + KEYSONLY REV LIMIT 3", &bulks(&["h", "f", "d"]));
    // Pagination with LIMIT and `(last-key`.
    c.ok("RANGE (d + LIMIT 1", &pairs(&[("f", "6")]));
    c.ok("RANGE (h + LIMIT 1", "*0\r\n");
}

#[test]
fn range_withversions_match_getv() {
    let s = server();
    let mut c = s.connect();
    fill(&mut c);
    let getv = c.q("GETV d");
    let ver = getv.rsplit(':').next().unwrap().trim_end().to_string();
    c.ok(
        "RANGE [d [d WITHVERSIONS",
        &format!("*3\r\n{}{}:{ver}\r\n", bulk("d"), bulk("4")),
    );
    c.ok(
        "RANGE [d [d KEYSONLY WITHVERSIONS",
        &format!("*2\r\n{}:{ver}\r\n", bulk("d")),
    );
    let r = c.q("RANGE - + WITHVERSIONS");
    assert!(r.starts_with("*12\r\n"), "{r}");
}

#[test]
fn range_floor_start() {
    let s = server();
    let mut c = s.connect();
    // Chunks at file offsets: 0000, 0100, 0200.
    c.ok("MSET f:0000 a f:0100 b f:0200 c", OK);
    // Offset 0150 lies in the chunk at 0100.
    c.ok(
        "RANGE [f:0150 + FLOOR",
        &pairs(&[("f:0100", "b"), ("f:0200", "c")]),
    );
    c.ok("RANGE [f:0100 + FLOOR LIMIT 1", &pairs(&[("f:0100", "b")]));
    // No key at or below the start: the range begins at the start.
    c.ok(
        "RANGE [a [f:0100 FLOOR",
        &pairs(&[("f:0000", "a"), ("f:0100", "b")]),
    );
    c.ok("RANGE [f:0250 + FLOOR KEYSONLY", &bulks(&["f:0200"]));
    let needs = err("ERR FLOOR needs an inclusive start");
    c.ok("RANGE (f:0150 + FLOOR", &needs);
    c.ok("RANGE - + FLOOR", &needs);
    c.ok("RANGE + + FLOOR", &needs);
}

#[test]
fn range_errors() {
    let s = server();
    let mut c = s.connect();
    fill(&mut c);
    c.ok("RANGE", &arity("range"));
    c.ok("RANGE -", &arity("range"));
    for bad in [
        "RANGE a +",
        "RANGE - b",
        "RANGE ++ +",
        "RANGE -- +",
        "RANGE {a +",
    ] {
        c.ok(bad, BAD_BOUND);
    }
    assert_eq!(c.cmd(&[b"RANGE", b"", b"+"]), BAD_BOUND.as_bytes());
    c.ok("RANGE - + LIMIT", SYNTAX);
    c.ok("RANGE - + LIMIT x", NOT_INT);
    c.ok("RANGE - + LIMIT 1.5", NOT_INT);
    c.ok("RANGE - + BOGUS", SYNTAX);
    c.ok("RANGE - + LIMIT 1 BOGUS", SYNTAX);
}

#[test]
fn range_bounds_longer_than_a_key() {
    let s = server();
    let mut c = s.connect();
    let max = "m".repeat(460);
    let below = format!("{}l", "m".repeat(459));
    c.ok(&format!("MSET a 1 {below} 2 {max} 3 z 4"), OK);
    let long = format!("{max}m");
    // Every key is at most 460 bytes: `[long` starts after `max`, `[long`
    // as an end includes it.
    c.ok(&format!("RANGE [{long} + KEYSONLY"), &bulks(&["z"]));
    c.ok(&format!("RANGE ({long} + KEYSONLY"), &bulks(&["z"]));
    c.ok(
        &format!("RANGE - [{long} KEYSONLY"),
        &bulks(&["a", &below, &max]),
    );
    c.ok(
        &format!("RANGE - ({long} KEYSONLY"),
        &bulks(&["a", &below, &max]),
    );
    // FLOOR from a long start finds the greatest key below it.
    c.ok(
        &format!("RANGE [{long} + KEYSONLY FLOOR"),
        &bulks(&[&max, "z"]),
    );
    // Also through the batched path (LIMIT) and in a pipeline.
    c.send(&encode(&[
        b"RANGE",
        format!("[{long}").as_bytes(),
        b"+",
        b"LIMIT",
        b"5",
        b"KEYSONLY",
    ]));
    c.send(&encode(&[b"GET", b"z"]));
    assert_eq!(c.reply_str(), bulks(&["z"]));
    assert_eq!(c.reply_str(), bulk("4"));
    // A long bound that is not past every key.
    let long_low = format!("[{}", "b".repeat(600));
    c.ok(
        &format!("RANGE {long_low} + KEYSONLY LIMIT 1"),
        &bulks(&[&below]),
    );
}

#[test]
fn range_reply_limit() {
    let mut cfg = config();
    cfg.max_reply_bytes = combkv_server::ByteSize(2048);
    let s = TestServer::start(cfg);
    let mut c = s.connect();
    let v = "x".repeat(500);
    for k in ["a", "b", "c", "d", "e", "f"] {
        c.ok(&format!("SET {k} {v}"), OK);
    }
    let too_big = err("ERR range reply exceeds max-reply-bytes; use LIMIT");
    // Unbatched (no LIMIT) and batched (small LIMIT) paths refuse alike.
    c.ok("RANGE - +", &too_big);
    c.ok("RANGE - + LIMIT 6", &too_big);
    c.ok("RANGEAT 1 - +", &err("ERR no such snapshot"));
    let id = as_int(&c.q("SNAPSHOT CREATE"));
    c.ok(&format!("RANGEAT {id} - +"), &too_big);
    // Pages fit.
    let page = c.q("RANGE - + LIMIT 2");
    assert!(page.starts_with("*4\r\n"));
    c.ok(
        "RANGE - + KEYSONLY",
        &bulks(&["a", "b", "c", "d", "e", "f"]),
    );
    // The connection is still usable.
    c.ok("PING", "+PONG\r\n");
}

#[test]
fn floor_and_ceil() {
    let s = server();
    let mut c = s.connect();
    c.ok("FLOOR m", NIL_ARRAY);
    c.ok("CEIL m", NIL_ARRAY);
    fill(&mut c);
    c.ok("FLOOR d", &bulks(&["d", "4"]));
    c.ok("FLOOR e", &bulks(&["d", "4"]));
    c.ok("FLOOR a", NIL_ARRAY);
    c.ok("FLOOR z", &bulks(&["h", "8"]));
    c.ok("CEIL d", &bulks(&["d", "4"]));
    c.ok("CEIL e", &bulks(&["f", "6"]));
    c.ok("CEIL z", NIL_ARRAY);
    c.ok("CEIL a", &bulks(&["b", "2"]));
    c.ok("FLOOR", &arity("floor"));
    c.ok("CEIL a b", &arity("ceil"));
    c.ok(&format!("FLOOR {}", long_key()), KEY_TOO_LONG);
    c.ok(&format!("CEIL {}", long_key()), KEY_TOO_LONG);
}

#[test]
fn snapshots_see_old_data() {
    let s = server();
    let mut c = s.connect();
    fill(&mut c);
    let id = as_int(&c.q("SNAPSHOT CREATE"));
    assert!(id > 0);
    c.ok("SET d 40", OK);
    c.ok("DEL f", &int(1));
    c.ok("SET c 3", OK);
    c.ok(&format!("GETAT {id} d"), &bulk("4"));
    c.ok(&format!("GETAT {id} f"), &bulk("6"));
    c.ok(&format!("GETAT {id} c"), NIL);
    c.ok("GET d", &bulk("40"));
    c.ok(
        &format!("RANGEAT {id} - +"),
        &pairs(&[("b", "2"), ("d", "4"), ("f", "6"), ("h", "8")]),
    );
    c.ok(
        &format!("RANGEAT {id} [c + LIMIT 2 REV KEYSONLY"),
        &bulks(&["h", "f"]),
    );
    c.ok(
        &format!("RANGEAT {id} [e + FLOOR KEYSONLY"),
        &bulks(&["d", "f", "h"]),
    );
    c.ok(&format!("RANGEAT {id} + -"), "*0\r\n");
    c.ok(
        "RANGE - +",
        &pairs(&[("b", "2"), ("c", "3"), ("d", "40"), ("h", "8")]),
    );
    // LIST shows it with the version it pins and its time left (default
    // 60 s).
    let list = c.q("SNAPSHOT LIST");
    let prefix = format!("*1\r\n*3\r\n:{id}\r\n:");
    assert!(list.starts_with(&prefix), "{list}");
    let rest: Vec<i64> = list[prefix.len()..]
        .split("\r\n:")
        .map(|f| f.trim_end().parse().unwrap())
        .collect();
    assert!(rest[0] > 0, "a version: {list}");
    assert!((50_000..=60_000).contains(&rest[1]), "{list}");
    // Explicit expiry.
    let id2 = as_int(&c.q("SNAPSHOT CREATE EX 5"));
    assert!(id2 > id);
    c.ok(&format!("SNAPSHOT RELEASE {id2}"), &int(1));
    c.ok(&format!("SNAPSHOT RELEASE {id}"), &int(1));
    c.ok(&format!("SNAPSHOT RELEASE {id}"), &int(0));
    c.ok("SNAPSHOT RELEASE 0", &int(0));
    c.ok("SNAPSHOT LIST", "*0\r\n");
    let gone = err("ERR no such snapshot");
    c.ok(&format!("GETAT {id} d"), &gone);
    c.ok(&format!("RANGEAT {id} - +"), &gone);
    c.ok(&format!("RANGEAT {id} + -"), &gone);
    c.ok("GETAT 0 d", &gone);
    c.ok("GETAT -3 d", &gone);
    c.ok("SNAPSHOT RELEASE -3", &int(0));
}

#[test]
fn snapshot_errors_and_limits() {
    let mut cfg = config();
    cfg.max_snapshots = 2;
    cfg.max_snapshot_seconds = 100;
    let s = TestServer::start(cfg);
    let mut c = s.connect();
    c.ok("SNAPSHOT", &arity("snapshot"));
    c.ok(
        "SNAPSHOT BOGUS",
        &err("ERR unknown subcommand 'BOGUS'. Try SNAPSHOT HELP."),
    );
    let help = c.q("SNAPSHOT HELP");
    assert!(help.starts_with('*') && help.contains("RELEASE"), "{help}");
    c.ok("SNAPSHOT CREATE EX", SYNTAX);
    c.ok("SNAPSHOT CREATE PX 5", SYNTAX);
    c.ok("SNAPSHOT CREATE EX x", NOT_INT);
    c.ok(
        "SNAPSHOT CREATE EX 0",
        &err("ERR invalid expire time in 'snapshot' command"),
    );
    c.ok(
        "SNAPSHOT CREATE EX 101",
        &err("ERR snapshot expiry exceeds max-snapshot-seconds (100)"),
    );
    c.ok("SNAPSHOT RELEASE", &arity("snapshot|release"));
    c.ok("SNAPSHOT RELEASE x", NOT_INT);
    c.ok("SNAPSHOT LIST x", &arity("snapshot|list"));
    // Ids are handles: unique even for one version, counted one by one,
    // released one by one. A store never written to pins version 0.
    let a = as_int(&c.q("SNAPSHOT CREATE"));
    let b = as_int(&c.q("SNAPSHOT CREATE"));
    assert!(a > 0 && b > a, "{a} {b}");
    c.ok("SNAPSHOT CREATE", &err("ERR too many snapshots"));
    c.ok("SET k v0", OK);
    c.ok(&format!("SNAPSHOT RELEASE {a}"), &int(1));
    c.ok(&format!("SNAPSHOT RELEASE {a}"), &int(0));
    c.ok(&format!("GETAT {a} k"), &err("ERR no such snapshot"));
    c.ok(&format!("GETAT {b} k"), NIL);
    c.ok(&format!("RANGEAT {b} - +"), "*0\r\n");
    let list = c.q("SNAPSHOT LIST");
    assert_eq!(
        list,
        format!(
            "*1\r\n*3\r\n:{b}\r\n:0\r\n:{}",
            &list[list.rfind(':').unwrap() + 1..]
        )
    );
    c.ok(&format!("SNAPSHOT RELEASE {b}"), &int(1));
    let id = as_int(&c.q("SNAPSHOT CREATE EX 100"));
    c.ok("SET k v", OK);
    as_int(&c.q("SNAPSHOT CREATE"));
    c.ok("SET k w", OK);
    c.ok("SNAPSHOT CREATE", &err("ERR too many snapshots"));
    c.ok("GETAT 1", &arity("getat"));
    c.ok("GETAT x k", NOT_INT);
    c.ok("RANGEAT 1 -", &arity("rangeat"));
    c.ok("RANGEAT x - +", NOT_INT);
    c.ok(&format!("GETAT {id} {}", long_key()), KEY_TOO_LONG);
    c.ok(&format!("RANGEAT {id} a +"), BAD_BOUND);
    c.ok(
        &format!("RANGEAT {id} (a + FLOOR"),
        &err("ERR FLOOR needs an inclusive start"),
    );
}

/// RANGEs pipelined in one read go to the read engine as one batch, their
/// parsed bounds kept in slots the connection reuses from batch to batch.
/// Every reply must equal the one the unbatched path gives (an inline
/// request never joins a batch), whatever sits beside it in the pipeline.
#[test]
fn pipelined_ranges_answer_as_unbatched_ones() {
    let s = server();
    let mut c = s.connect();
    c.ok("MSET a 1 ab 2 abc 3 b 4 bcd 5 c 6 cc 7 d 8", OK);
    let lines = [
        "RANGE [ab + LIMIT 2",
        "RANGE (a [c LIMIT 10 REV",
        "GET abc",
        "RANGE [abcdefghijklmnop + LIMIT 1 KEYSONLY",
        "RANGE - +",
        "RANGE [b (cc LIMIT 3 WITHVERSIONS",
        "RANGE [x [a LIMIT 2",
        "RANGE [c + LIMIT 0",
        "RANGE [bb + LIMIT 2 FLOOR",
        "RANGE [a + LIMIT x",
        "RANGE (b + LIMIT 2",
        "RANGE [a",
        "MGET a zz d",
        "RANGE - (c LIMIT 1000 KEYSONLY",
    ];
    let unbatched: Vec<Vec<u8>> = lines
        .iter()
        .map(|l| {
            c.send(format!("{l}\r\n").as_bytes());
            c.reply()
        })
        .collect();
    for round in 0..lines.len() {
        // Rotated each round: every request meets other neighbours, and
        // slots are refilled with bounds of other lengths.
        let order: Vec<usize> = (0..lines.len())
            .map(|i| (i + round) % lines.len())
            .collect();
        let mut bytes = Vec::new();
        for &i in &order {
            let args: Vec<&[u8]> = lines[i].split(' ').map(str::as_bytes).collect();
            bytes.extend(encode(&args));
        }
        c.send(&bytes);
        for &i in &order {
            assert_eq!(
                String::from_utf8_lossy(&c.reply()),
                String::from_utf8_lossy(&unbatched[i]),
                "round {round}: {}",
                lines[i]
            );
        }
    }
}
