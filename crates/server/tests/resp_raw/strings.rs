//! String commands: GET SET SETNX SETEX PSETEX GETSET GETDEL MGET MSET
//! APPEND STRLEN INCR DECR INCRBY DECRBY, GETV and CAS; each with its happy
//! path and error paths.

use crate::wire::*;

#[test]
fn get_and_set_happy_paths_and_errors() {
    let s = server();
    let mut c = s.connect();
    c.ok("GET k", NIL);
    c.ok("SET k v1", OK);
    c.ok("GET k", &bulk("v1"));
    // Binary-safe values, CRLF inside.
    assert_eq!(c.cmd(&[b"SET", b"bin", b"a\r\nb\0"]), OK.as_bytes());
    assert_eq!(c.cmd(&[b"GET", b"bin"]), b"$5\r\na\r\nb\0\r\n");
    // Empty value is a value.
    assert_eq!(c.cmd(&[b"SET", b"e", b""]), OK.as_bytes());
    c.ok("GET e", "$0\r\n\r\n");
    c.ok("GET", &arity("get"));
    c.ok("GET a b", &arity("get"));
    c.ok("SET k", &arity("set"));
    c.ok(&format!("GET {}", long_key()), KEY_TOO_LONG);
    c.ok(&format!("SET {} v", long_key()), KEY_TOO_LONG);
    c.ok(&format!("SET k {}", big_value()), VALUE_TOO_LARGE);
    // A value exactly at the limit is accepted.
    c.ok(&format!("SET k {}", "v".repeat(1024)), OK);
    // Empty keys are refused (combkv difference).
    assert_eq!(c.cmd(&[b"SET", b"", b"v"]), b"-ERR empty key\r\n");
    assert_eq!(c.cmd(&[b"GET", b""]), b"-ERR empty key\r\n");
    // Commands are case-insensitive.
    c.ok("set k v2", OK);
    c.ok("gEt k", &bulk("v2"));
}

#[test]
fn set_conditions_and_get_option() {
    let s = server();
    let mut c = s.connect();
    c.ok("SET k v XX", NIL);
    c.ok("GET k", NIL);
    c.ok("SET k v NX", OK);
    c.ok("SET k w NX", NIL);
    c.ok("GET k", &bulk("v"));
    c.ok("SET k w XX", OK);
    c.ok("GET k", &bulk("w"));
    // GET returns the old value (nil if none) and still sets.
    c.ok("SET k x GET", &bulk("w"));
    c.ok("SET n x GET", NIL);
    c.ok("GET n", &bulk("x"));
    // NX GET (Redis 7): old value, set only if absent.
    c.ok("SET k y NX GET", &bulk("x"));
    c.ok("GET k", &bulk("x"));
    c.ok("SET m y NX GET", NIL);
    c.ok("GET m", &bulk("y"));
    c.ok("SET k z XX GET", &bulk("x"));
    c.ok("SET absent z XX GET", NIL);
    c.ok("GET absent", NIL);
    // Repeating an option is allowed, as in Redis.
    c.ok("SET k a NX NX", NIL);
    c.ok("SET k a XX XX GET GET", &bulk("z"));
    // Conflicts are syntax errors.
    c.ok("SET k v NX XX", SYNTAX);
    c.ok("SET k v XX NX", SYNTAX);
    c.ok("SET k v BOGUS", SYNTAX);
    c.ok("GET k", &bulk("a"));
}

#[test]
fn setex_psetex_and_getset() {
    let s = server();
    let mut c = s.connect();
    c.ok("SETEX k 100 v", OK);
    c.ok("GET k", &bulk("v"));
    let ttl = as_int(&c.q("TTL k"));
    assert!((99..=100).contains(&ttl), "ttl {ttl}");
    c.ok("PSETEX k 100000 w", OK);
    c.ok("GET k", &bulk("w"));
    let pttl = as_int(&c.q("PTTL k"));
    assert!((90_000..=100_000).contains(&pttl), "pttl {pttl}");
    // GETSET: the old value, and the time to live cleared as by SET.
    c.ok("GETSET k x", &bulk("w"));
    c.ok("TTL k", &int(-1));
    c.ok("GET k", &bulk("x"));
    c.ok("GETSET fresh y", NIL);
    c.ok("GET fresh", &bulk("y"));
    // Errors, Redis 7's texts; nothing is written.
    for (bad, name) in [
        ("SETEX k 0 z", "setex"),
        ("SETEX k -1 z", "setex"),
        ("SETEX k 9223372036854775807 z", "setex"),
        ("PSETEX k 0 z", "psetex"),
        ("PSETEX k -5 z", "psetex"),
    ] {
        c.ok(
            bad,
            &err(&format!("ERR invalid expire time in '{name}' command")),
        );
    }
    c.ok("SETEX k abc z", NOT_INT);
    c.ok("PSETEX k 1.5 z", NOT_INT);
    c.ok("SETEX k 10", &arity("setex"));
    c.ok("PSETEX k 10 v extra", &arity("psetex"));
    c.ok("GETSET k", &arity("getset"));
    c.ok(&format!("SETEX {} 10 v", long_key()), KEY_TOO_LONG);
    c.ok(&format!("GETSET k {}", big_value()), VALUE_TOO_LARGE);
    c.ok("GET k", &bulk("x"));
    // A short time to live runs out.
    c.ok("PSETEX gone 1 v", OK);
    std::thread::sleep(std::time::Duration::from_millis(20));
    c.ok("GET gone", NIL);
}

#[test]
fn set_expiry_options() {
    let s = server();
    let mut c = s.connect();
    c.ok("SET k v EX 100", OK);
    let ttl = as_int(&c.q("TTL k"));
    assert!((99..=100).contains(&ttl), "ttl {ttl}");
    c.ok("SET k v PX 100000", OK);
    let pttl = as_int(&c.q("PTTL k"));
    assert!((90_000..=100_000).contains(&pttl), "pttl {pttl}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    c.ok(&format!("SET k v EXAT {}", now.as_secs() + 200), OK);
    let ttl = as_int(&c.q("TTL k"));
    assert!((198..=200).contains(&ttl), "ttl {ttl}");
    c.ok(&format!("SET k v PXAT {}", now.as_millis() + 300_000), OK);
    let ttl = as_int(&c.q("TTL k"));
    assert!((298..=300).contains(&ttl), "ttl {ttl}");
    // KEEPTTL keeps it; a plain SET clears it.
    c.ok("SET k v2 KEEPTTL", OK);
    let ttl = as_int(&c.q("TTL k"));
    assert!((298..=300).contains(&ttl), "ttl {ttl}");
    c.ok("GET k", &bulk("v2"));
    c.ok("SET k v3", OK);
    c.ok("TTL k", &int(-1));
    // A deadline in the past: set, and gone at once.
    c.ok("SET old v PXAT 1", OK);
    c.ok("GET old", NIL);
    c.ok("EXISTS old", &int(0));
    // The same expiry option twice: the last wins (Redis allows it).
    c.ok("SET k v EX 10 EX 1000", OK);
    let ttl = as_int(&c.q("TTL k"));
    assert!((999..=1000).contains(&ttl), "ttl {ttl}");
    c.ok("SET k v KEEPTTL KEEPTTL", OK);
    // Two different expiry options, or one with KEEPTTL: syntax error.
    for bad in [
        "SET k v EX 10 PX 10",
        "SET k v PX 10 EX 10",
        "SET k v EX 10 EXAT 10",
        "SET k v PXAT 10 PX 10",
        "SET k v EX 10 KEEPTTL",
        "SET k v KEEPTTL EX 10",
        "SET k v KEEPTTL PXAT 10",
        "SET k v EX",
        "SET k v NX EX",
    ] {
        c.ok(bad, SYNTAX);
    }
    // Bad expiry values, checked after the options parse.
    c.ok("SET k v EX abc", NOT_INT);
    c.ok("SET k v EX 1.5", NOT_INT);
    c.ok("SET k v EX abc BOGUS", SYNTAX);
    c.ok("SET k v EX abc NX XX", SYNTAX);
    let invalid = err("ERR invalid expire time in 'set' command");
    for bad in [
        "SET k v EX 0",
        "SET k v EX -1",
        "SET k v PX 0",
        "SET k v EXAT 0",
        "SET k v PXAT -5",
        "SET k v EX 9223372036854775807",
        "SET k v PX 9223372036854775807",
        "SET k v EXAT 9223372036854776",
    ] {
        c.ok(bad, &invalid);
    }
    c.ok("SET k v EX 99999999999999999999", NOT_INT);
    // Nothing above changed the value.
    c.ok("GET k", &bulk("v"));
}

#[test]
fn setnx_getdel_strlen_append() {
    let s = server();
    let mut c = s.connect();
    c.ok("SETNX k v", &int(1));
    c.ok("SETNX k w", &int(0));
    c.ok("GET k", &bulk("v"));
    c.ok("SETNX k", &arity("setnx"));
    c.ok(&format!("SETNX {} v", long_key()), KEY_TOO_LONG);
    c.ok(&format!("SETNX n {}", big_value()), VALUE_TOO_LARGE);
    c.ok("EXISTS n", &int(0));

    c.ok("GETDEL k", &bulk("v"));
    c.ok("GETDEL k", NIL);
    c.ok("EXISTS k", &int(0));
    c.ok("GETDEL", &arity("getdel"));
    c.ok(&format!("GETDEL {}", long_key()), KEY_TOO_LONG);

    c.ok("STRLEN k", &int(0));
    c.ok("APPEND k abc", &int(3));
    c.ok("APPEND k de", &int(5));
    c.ok("GET k", &bulk("abcde"));
    c.ok("STRLEN k", &int(5));
    c.ok("STRLEN", &arity("strlen"));
    c.ok("APPEND k", &arity("append"));
    c.ok(&format!("STRLEN {}", long_key()), KEY_TOO_LONG);
    c.ok(&format!("APPEND {} x", long_key()), KEY_TOO_LONG);
    // Growing past the value limit is refused and changes nothing.
    c.ok(&format!("APPEND k {}", "x".repeat(1020)), VALUE_TOO_LARGE);
    c.ok("GET k", &bulk("abcde"));
    c.ok(&format!("APPEND k {}", "x".repeat(1019)), &int(1024));
}

#[test]
fn mget_and_mset() {
    let s = server();
    let mut c = s.connect();
    c.ok("MSET a 1 b 2", OK);
    c.ok("MGET a b c", "*3\r\n$1\r\n1\r\n$1\r\n2\r\n$-1\r\n");
    c.ok("MGET", &arity("mget"));
    c.ok("MSET a", &arity("mset"));
    c.ok("MSET a 1 b", &arity("mset"));
    c.ok(&format!("MGET a {}", long_key()), KEY_TOO_LONG);
    // A bad pair anywhere refuses the whole MSET.
    c.ok(&format!("MSET a 9 {} 1", long_key()), KEY_TOO_LONG);
    c.ok(&format!("MSET a 9 b {}", big_value()), VALUE_TOO_LARGE);
    assert_eq!(
        c.cmd(&[b"MSET", b"a", b"9", b"", b"1"]),
        b"-ERR empty key\r\n"
    );
    c.ok("MGET a b", &bulks(&["1", "2"]));
    // The same key twice: the last value wins.
    c.ok("MSET d 1 d 2", OK);
    c.ok("GET d", &bulk("2"));
}

#[test]
fn incr_family() {
    let s = server();
    let mut c = s.connect();
    c.ok("INCR n", &int(1));
    c.ok("INCR n", &int(2));
    c.ok("DECR n", &int(1));
    c.ok("INCRBY n 10", &int(11));
    c.ok("DECRBY n 20", &int(-9));
    c.ok("INCRBY n -1", &int(-10));
    c.ok("GET n", &bulk("-10"));
    c.ok("DECR fresh", &int(-1));
    for (cmd, name) in [
        ("INCR", "incr"),
        ("DECR", "decr"),
        ("INCRBY n", "incrby"),
        ("DECRBY n", "decrby"),
    ] {
        c.ok(cmd.split(' ').next().unwrap(), &arity(name));
        c.ok(&format!("{cmd} x y"), &arity(name));
    }
    c.ok("INCRBY n x", NOT_INT);
    c.ok("INCRBY n 1.5", NOT_INT);
    c.ok("INCRBY n +1", NOT_INT);
    c.ok("INCRBY n 01", NOT_INT);
    c.ok("INCRBY n 99999999999999999999", NOT_INT);
    c.ok("DECRBY n x", NOT_INT);
    c.ok("SET s abc", OK);
    c.ok("INCR s", NOT_INT);
    c.ok("SET s 1.0", OK);
    c.ok("INCR s", NOT_INT);
    c.ok("SET max 9223372036854775807", OK);
    c.ok(
        "INCR max",
        &err("ERR increment or decrement would overflow"),
    );
    c.ok("SET min -9223372036854775808", OK);
    c.ok(
        "DECR min",
        &err("ERR increment or decrement would overflow"),
    );
    c.ok(
        "DECRBY n -9223372036854775808",
        &err("ERR decrement would overflow"),
    );
    c.ok(&format!("INCR {}", long_key()), KEY_TOO_LONG);
    c.ok("GET max", &bulk("9223372036854775807"));
}

#[test]
fn getv_and_cas() {
    let s = server();
    let mut c = s.connect();
    c.ok("GETV k", NIL_ARRAY);
    // Version 0: only if absent.
    let v1 = as_int(&c.q("CAS k 0 a"));
    assert!(v1 > 0);
    c.ok("CAS k 0 b", NIL);
    c.ok("GETV k", &format!("*2\r\n{}{}", bulk("a"), int(v1)));
    let v2 = as_int(&c.q(&format!("CAS k {v1} b")));
    assert!(v2 > v1);
    // A stale version fails and changes nothing.
    c.ok(&format!("CAS k {v1} c"), NIL);
    c.ok("GET k", &bulk("b"));
    // Any other write changes the version.
    c.ok("SET k c", OK);
    c.ok(&format!("CAS k {v2} d"), NIL);
    let reply = c.q("GETV k");
    let v3: i64 = reply
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end()
        .parse()
        .unwrap();
    assert!(v3 > v2);
    // With an expiry.
    let v4 = as_int(&c.q(&format!("CAS k {v3} e EX 100")));
    let ttl = as_int(&c.q("TTL k"));
    assert!((99..=100).contains(&ttl), "ttl {ttl}");
    as_int(&c.q(&format!("CAS k {v4} f PX 100000")));
    // An absent key with a non-zero version.
    c.ok("CAS nokey 5 x", NIL);
    c.ok("GETV", &arity("getv"));
    c.ok("CAS k 1", &arity("cas"));
    c.ok("CAS k x v", NOT_INT);
    c.ok("CAS k -1 v", NOT_INT);
    c.ok("CAS k 1 v EX", SYNTAX);
    c.ok("CAS k 1 v KEEPTTL", SYNTAX);
    c.ok("CAS k 1 v EX 1 PX 1", SYNTAX);
    c.ok("CAS k 1 v EX x", NOT_INT);
    c.ok(
        "CAS k 1 v EX 0",
        &err("ERR invalid expire time in 'cas' command"),
    );
    c.ok(&format!("CAS {} 0 v", long_key()), KEY_TOO_LONG);
    c.ok(&format!("GETV {}", long_key()), KEY_TOO_LONG);
    c.ok(&format!("CAS k 0 {}", big_value()), VALUE_TOO_LARGE);
}
