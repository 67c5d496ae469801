//! Keyspace commands: DEL UNLINK EXISTS EXPIRE PEXPIRE EXPIREAT PEXPIREAT
//! TTL PTTL PERSIST TYPE DBSIZE FLUSHDB FLUSHALL KEYS SCAN.

use std::collections::{BTreeSet, HashMap};

use crate::wire::*;

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[test]
fn del_unlink_exists_type_dbsize() {
    let s = server();
    let mut c = s.connect();
    c.ok("MSET a 1 b 2 c 3", OK);
    c.ok("DBSIZE", &int(3));
    c.ok("EXISTS a b x", &int(2));
    // A key named twice counts twice, as in Redis.
    c.ok("EXISTS a a", &int(2));
    c.ok("TYPE a", "+string\r\n");
    c.ok("TYPE x", "+none\r\n");
    c.ok("DEL a x", &int(1));
    c.ok("DEL b b", &int(1));
    c.ok("UNLINK c", &int(1));
    c.ok("UNLINK c", &int(0));
    c.ok("DBSIZE", &int(0));
    for name in ["del", "unlink", "exists", "type"] {
        c.ok(&name.to_uppercase(), &arity(name));
    }
    c.ok("TYPE a b", &arity("type"));
    c.ok("DBSIZE x", &arity("dbsize"));
    c.ok(&format!("DEL a {}", long_key()), KEY_TOO_LONG);
    c.ok(&format!("EXISTS {}", long_key()), KEY_TOO_LONG);
    c.ok(&format!("TYPE {}", long_key()), KEY_TOO_LONG);
    assert_eq!(c.cmd(&[b"DEL", b""]), b"-ERR empty key\r\n");
}

#[test]
fn flushdb_and_flushall() {
    let s = server();
    let mut c = s.connect();
    c.ok("MSET a 1 b 2", OK);
    c.ok("FLUSHDB", OK);
    c.ok("DBSIZE", &int(0));
    c.ok("MSET a 1 b 2", OK);
    c.ok("FLUSHALL ASYNC", OK);
    c.ok("DBSIZE", &int(0));
    c.ok("SET a 1", OK);
    c.ok("FLUSHALL sync", OK);
    c.ok("GET a", NIL);
    c.ok("FLUSHALL bogus", SYNTAX);
    c.ok("FLUSHDB SYNC ASYNC", SYNTAX);
}

#[test]
fn ttl_pttl_persist() {
    let s = server();
    let mut c = s.connect();
    c.ok("TTL k", &int(-2));
    c.ok("PTTL k", &int(-2));
    c.ok("SET k v", OK);
    c.ok("TTL k", &int(-1));
    c.ok("PTTL k", &int(-1));
    c.ok("PERSIST k", &int(0));
    c.ok("EXPIRE k 100", &int(1));
    let ttl = as_int(&c.q("TTL k"));
    assert!((99..=100).contains(&ttl));
    let pttl = as_int(&c.q("PTTL k"));
    assert!((98_000..=100_000).contains(&pttl));
    c.ok("PERSIST k", &int(1));
    c.ok("TTL k", &int(-1));
    c.ok("PERSIST nokey", &int(0));
    for name in ["ttl", "pttl", "persist"] {
        c.ok(&name.to_uppercase(), &arity(name));
        c.ok(&format!("{} a b", name.to_uppercase()), &arity(name));
        c.ok(&format!("{} {}", name, long_key()), KEY_TOO_LONG);
    }
}

#[test]
fn expire_family_with_nx_xx_gt_lt() {
    let s = server();
    let mut c = s.connect();
    c.ok("EXPIRE nokey 100", &int(0));
    c.ok("SET k v", OK);
    // XX and GT need an existing TTL; NX and LT work without one.
    c.ok("EXPIRE k 100 XX", &int(0));
    c.ok("EXPIRE k 100 GT", &int(0));
    c.ok("TTL k", &int(-1));
    c.ok("EXPIRE k 100 NX", &int(1));
    c.ok("EXPIRE k 200 NX", &int(0));
    c.ok("EXPIRE k 50 GT", &int(0));
    c.ok("EXPIRE k 200 GT", &int(1));
    c.ok("EXPIRE k 300 LT", &int(0));
    c.ok("EXPIRE k 150 LT", &int(1));
    c.ok("EXPIRE k 120 XX LT", &int(1));
    let ttl = as_int(&c.q("TTL k"));
    assert!((119..=120).contains(&ttl), "ttl {ttl}");
    c.ok("PERSIST k", &int(1));
    c.ok("EXPIRE k 100 LT", &int(1));
    // Options are case-insensitive and may repeat.
    c.ok("EXPIRE k 100 xx xx", &int(1));
    c.ok("PEXPIRE k 50000 gt", &int(0));
    c.ok("PEXPIRE k 500000 GT", &int(1));
    let pttl = as_int(&c.q("PTTL k"));
    assert!((490_000..=500_000).contains(&pttl), "pttl {pttl}");
    let at = unix_secs() + 1000;
    c.ok(&format!("EXPIREAT k {at}"), &int(1));
    let ttl = as_int(&c.q("TTL k"));
    assert!((998..=1000).contains(&ttl), "ttl {ttl}");
    c.ok(&format!("PEXPIREAT k {} NX", at * 1000), &int(0));
    c.ok(&format!("PEXPIREAT k {} LT", (at - 500) * 1000), &int(1));
    let ttl = as_int(&c.q("TTL k"));
    assert!((498..=500).contains(&ttl), "ttl {ttl}");
    // A time in the past deletes the key (and counts as set).
    c.ok("EXPIRE k -1", &int(1));
    c.ok("EXISTS k", &int(0));
    c.ok("SET k v", OK);
    c.ok("PEXPIREAT k 1", &int(1));
    c.ok("GET k", NIL);
    c.ok("SET k v", OK);
    c.ok("EXPIRE k 0", &int(1));
    c.ok("GET k", NIL);

    // Errors: options are checked before the time.
    c.ok("SET k v", OK);
    let nx_conflict = err("ERR NX and XX, GT or LT options at the same time are not compatible");
    c.ok("EXPIRE k 10 NX XX", &nx_conflict);
    c.ok("EXPIRE k 10 NX GT", &nx_conflict);
    c.ok("PEXPIRE k 10 LT NX", &nx_conflict);
    c.ok(
        "EXPIRE k 10 GT LT",
        &err("ERR GT and LT options at the same time are not compatible"),
    );
    c.ok("EXPIRE k 10 BOGUS", &err("ERR Unsupported option BOGUS"));
    c.ok("EXPIRE k abc BOGUS", &err("ERR Unsupported option BOGUS"));
    c.ok("EXPIRE k abc", NOT_INT);
    c.ok("EXPIRE k 1.5", NOT_INT);
    c.ok("PEXPIREAT k x NX", NOT_INT);
    c.ok(
        "EXPIRE k 9223372036854775807",
        &err("ERR invalid expire time in 'expire' command"),
    );
    c.ok(
        "PEXPIRE k 9223372036854775807",
        &err("ERR invalid expire time in 'pexpire' command"),
    );
    c.ok(
        "EXPIREAT k 9223372036854775807",
        &err("ERR invalid expire time in 'expireat' command"),
    );
    c.ok(
        "EXPIRE k -9223372036854775807",
        &err("ERR invalid expire time in 'expire' command"),
    );
    for name in ["expire", "pexpire", "expireat", "pexpireat"] {
        c.ok(&format!("{} k", name.to_uppercase()), &arity(name));
        c.ok(&format!("{} {} 10", name, long_key()), KEY_TOO_LONG);
    }
    c.ok("TTL k", &int(-1));
    c.ok("GET k", &bulk("v"));
}

#[test]
fn keys_in_key_order() {
    let s = server();
    let mut c = s.connect();
    // Inserted out of order; KEYS answers in byte order.
    c.ok(
        "MSET user:3 a user:1 b admin c user:20 d user:2 e usa f",
        OK,
    );
    c.ok(
        "KEYS *",
        &bulks(&["admin", "usa", "user:1", "user:2", "user:20", "user:3"]),
    );
    c.ok(
        "KEYS user:*",
        &bulks(&["user:1", "user:2", "user:20", "user:3"]),
    );
    c.ok("KEYS user:?", &bulks(&["user:1", "user:2", "user:3"]));
    c.ok("KEYS user:[12]*", &bulks(&["user:1", "user:2", "user:20"]));
    c.ok("KEYS *a", &bulks(&["usa"]));
    c.ok("KEYS nomatch*", "*0\r\n");
    c.ok("KEYS", &arity("keys"));
    c.ok("KEYS a b", &arity("keys"));
}

#[test]
fn keys_reply_limit() {
    let mut cfg = config();
    cfg.max_reply_bytes = combkv_server::ByteSize(1024);
    let s = TestServer::start(cfg);
    let mut c = s.connect();
    for i in 0..100 {
        c.ok(&format!("SET key:{i:03} v"), OK);
    }
    c.ok(
        "KEYS *",
        &err("ERR keys reply exceeds max-reply-bytes; use SCAN"),
    );
    c.ok(
        "KEYS key:00*",
        &bulks(&[
            "key:000", "key:001", "key:002", "key:003", "key:004", "key:005", "key:006", "key:007",
            "key:008", "key:009",
        ]),
    );
}

/// Parses a SCAN reply: (cursor, keys).
fn scan_reply(r: &[u8]) -> (String, Vec<String>) {
    let s = String::from_utf8(r.to_vec()).unwrap();
    let mut lines = s.split("\r\n");
    assert_eq!(lines.next(), Some("*2"));
    lines.next(); // $len of the cursor
    let cursor = lines.next().unwrap().to_string();
    let n: usize = lines.next().unwrap()[1..].parse().unwrap();
    let mut keys = Vec::new();
    for _ in 0..n {
        lines.next();
        keys.push(lines.next().unwrap().to_string());
    }
    (cursor, keys)
}

fn scan_all(c: &mut Conn, opts: &str) -> Vec<String> {
    let mut cursor = "0".to_string();
    let mut all = Vec::new();
    loop {
        let (next, keys) = scan_reply(c.q(&format!("SCAN {cursor}{opts}")).as_bytes());
        all.extend(keys);
        if next == "0" {
            return all;
        }
        cursor = next;
    }
}

#[test]
fn scan_in_key_order_with_match_count_type() {
    let s = server();
    let mut c = s.connect();
    c.ok("SCAN 0", "*2\r\n$1\r\n0\r\n*0\r\n");
    let mut want = BTreeSet::new();
    for i in 0..57 {
        let k = format!("k{:02}", (i * 37) % 57);
        c.ok(&format!("SET {k} v"), OK);
        want.insert(k);
        c.ok(&format!("SET other{i} v"), OK);
    }
    let all = scan_all(&mut c, " MATCH k* COUNT 5");
    assert_eq!(all, want.iter().cloned().collect::<Vec<_>>());
    // Default COUNT, no MATCH: every key, in order.
    let all = scan_all(&mut c, "");
    assert_eq!(all.len(), 114);
    assert!(all.windows(2).all(|w| w[0] < w[1]));
    // A pattern whose literal prefix is not the whole match.
    let all = scan_all(&mut c, " MATCH k?5 COUNT 3");
    assert_eq!(all, ["k05", "k15", "k25", "k35", "k45", "k55"]);
    // A cursor resumed with a different MATCH still resumes after its key.
    let (cur, keys) = scan_reply(c.q("SCAN 0 MATCH k* COUNT 10").as_bytes());
    assert_eq!(keys.last().unwrap(), "k09");
    let (_, keys) = scan_reply(c.q(&format!("SCAN {cur} MATCH k1* COUNT 3")).as_bytes());
    assert_eq!(keys, ["k10", "k11", "k12"]);
    // A cursor past the pattern's prefix range ends the scan.
    let (cur, _) = scan_reply(c.q("SCAN 0 MATCH other* COUNT 2").as_bytes());
    c.ok(
        &format!("SCAN {cur} MATCH k* COUNT 2"),
        "*2\r\n$1\r\n0\r\n*0\r\n",
    );
    // TYPE: every key is a string.
    assert_eq!(scan_all(&mut c, " TYPE string COUNT 50").len(), 114);
    assert!(scan_all(&mut c, " TYPE hash COUNT 50").is_empty());
    // Errors.
    c.ok("SCAN", &arity("scan"));
    c.ok("SCAN x", &err("ERR invalid cursor"));
    c.ok("SCAN -1", &err("ERR invalid cursor"));
    c.ok("SCAN 12345678", &err("ERR invalid cursor"));
    c.ok("SCAN 0 COUNT 0", SYNTAX);
    c.ok("SCAN 0 COUNT x", NOT_INT);
    c.ok("SCAN 0 MATCH", SYNTAX);
    c.ok("SCAN 0 BOGUS 1", SYNTAX);
}

#[test]
fn scan_returns_every_stable_key_once_while_keys_change() {
    let s = server();
    let mut c = s.connect();
    let mut writer = s.connect();
    // Stable keys stay for the whole scan; churn keys come and go.
    let stable: BTreeSet<String> = (0..300).map(|i| format!("s:{:04}", i * 7 % 300)).collect();
    for k in &stable {
        c.ok(&format!("SET {k} v"), OK);
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut cursor = "0".to_string();
    let mut round = 0u32;
    let mut last: Option<String> = None;
    loop {
        let (next, keys) = scan_reply(c.q(&format!("SCAN {cursor} COUNT 7")).as_bytes());
        for k in keys {
            // Strictly ascending across calls.
            if let Some(l) = &last {
                assert!(k > *l, "{k} after {l}");
            }
            last = Some(k.clone());
            *seen.entry(k).or_default() += 1;
        }
        // Between calls: add keys before and after the cursor, delete some.
        round += 1;
        writer.ok(&format!("SET s:{:04}x v", (round * 13) % 300), OK);
        writer.ok(&format!("SET a:{round} v"), OK);
        writer.ok(&format!("SET z:{round} v"), OK);
        let del = writer.q(&format!("DEL s:{:04}x", (round * 29) % 300));
        assert!(del == int(0) || del == int(1), "{del}");
        if next == "0" {
            break;
        }
        cursor = next;
    }
    for k in &stable {
        assert_eq!(seen.get(k), Some(&1), "{k} seen {:?} times", seen.get(k));
    }
    assert!(seen.values().all(|&n| n == 1));
}

/// OBJECT: a string's encoding by its shape, REFCOUNT 1, nil for a missing
/// key before any other answer, IDLETIME and FREQ refused (combkv tracks
/// no accesses), Redis's arity and unknown-subcommand errors.
#[test]
fn object_encoding_refcount_and_untracked_times() {
    let s = server();
    let mut c = s.connect();
    c.ok("MSET i 123 n -9223372036854775808 z 01 f 1.5", OK);
    c.cmd(&[b"SET", b"e", &[b'x'; 44]]);
    c.cmd(&[b"SET", b"r", &[b'x'; 45]]);
    for (key, want) in [
        ("i", "int"),
        ("n", "int"),
        ("z", "embstr"),
        ("f", "embstr"),
        ("e", "embstr"),
        ("r", "raw"),
    ] {
        c.ok(&format!("OBJECT ENCODING {key}"), &bulk(want));
    }
    c.ok("object encoding nope", NIL);
    c.ok("OBJECT REFCOUNT r", &int(1));
    for sub in ["REFCOUNT", "IDLETIME", "FREQ"] {
        c.ok(&format!("OBJECT {sub} nope"), NIL);
    }
    c.ok(
        "OBJECT FREQ i",
        &err(
            "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please \
             note that when switching between policies at runtime LRU and LFU data will take \
             some time to adjust.",
        ),
    );
    let idle = c.q("OBJECT IDLETIME i");
    assert!(idle.starts_with("-ERR idle time not tracked"), "{idle}");
    c.ok("OBJECT", &arity("object"));
    c.ok("OBJECT ENCODING", &arity("object|encoding"));
    c.ok("OBJECT ENCODING i j", &arity("object|encoding"));
    c.ok("OBJECT HELP x", &arity("object|help"));
    c.ok(
        "OBJECT BOGUS i",
        &err("ERR unknown subcommand 'BOGUS'. Try OBJECT HELP."),
    );
    let help = c.q("OBJECT HELP");
    assert!(help.starts_with("*15\r\n+OBJECT <subcommand>"), "{help}");
    // Inside a transaction the key is seen as the queued writes left it.
    c.ok("MULTI", OK);
    c.ok("SET t 7", "+QUEUED\r\n");
    c.ok("OBJECT ENCODING t", "+QUEUED\r\n");
    c.ok("EXEC", &format!("*2\r\n{OK}{}", bulk("int")));
}
