//! The string and key commands redis clients use beside the basic ones:
//! GETEX, GETRANGE/SUBSTR, MSETNX, TOUCH, EXPIRETIME, PEXPIRETIME, RENAME,
//! RENAMENX, COPY, SETRANGE, SETBIT, GETBIT, BITCOUNT, BITPOS,
//! INCRBYFLOAT, LCS, with Redis 7's replies, options and errors.

use combkv_server::{ByteSize, ServerConfig};

use crate::wire::*;

#[test]
fn getex_sets_or_removes_the_expiry_and_answers_the_value() {
    let s = server();
    let mut c = s.connect();
    c.ok("SET k v", OK);
    // No option: a plain read.
    c.ok("GETEX k", &bulk("v"));
    c.ok("TTL k", &int(-1));
    c.ok("GETEX k EX 100", &bulk("v"));
    let ttl = as_int(&c.q("TTL k"));
    assert!((99..=100).contains(&ttl), "ttl {ttl}");
    c.ok("GETEX k PX 50000", &bulk("v"));
    let pttl = as_int(&c.q("PTTL k"));
    assert!((40_000..=50_000).contains(&pttl), "pttl {pttl}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let at = now + 1000;
    c.ok(&format!("GETEX k EXAT {at}"), &bulk("v"));
    c.ok("EXPIRETIME k", &int(at));
    c.ok(&format!("GETEX k PXAT {}", at * 1000 + 7), &bulk("v"));
    c.ok("PEXPIRETIME k", &int(at * 1000 + 7));
    c.ok("GETEX k PERSIST", &bulk("v"));
    c.ok("TTL k", &int(-1));
    // PERSIST on a key without an expiry leaves it as it is.
    let v1 = c.q("GETV k");
    c.ok("GETEX k PERSIST", &bulk("v"));
    assert_eq!(
        c.q("GETV k"),
        v1,
        "PERSIST without an expiry rewrote the key"
    );
    // A deadline in the past deletes the key and still answers the value.
    c.ok("GETEX k EXAT 1", &bulk("v"));
    c.ok("EXISTS k", &int(0));
    c.ok("GETEX nokey EX 10", NIL);
    c.ok("GETEX nokey", NIL);
    // Errors: Redis's texts; nothing changes.
    c.ok("SET k v", OK);
    for bad in [
        "GETEX k EX",
        "GETEX k EX 10 PX 10",
        "GETEX k PERSIST EX 10",
        "GETEX k EX 10 PERSIST",
        "GETEX k NX",
        "GETEX k KEEPTTL",
        "GETEX k BOGUS",
    ] {
        c.ok(bad, SYNTAX);
    }
    c.ok("GETEX k EX 10 EX 20", &bulk("v"));
    c.ok("GETEX k EX abc", NOT_INT);
    for bad in [
        "GETEX k EX 0",
        "GETEX k PX -1",
        "GETEX k EX 9223372036854775807",
    ] {
        c.ok(bad, &err("ERR invalid expire time in 'getex' command"));
    }
    c.ok("GETEX", &arity("getex"));
    c.ok(&format!("GETEX {}", long_key()), KEY_TOO_LONG);
}

#[test]
fn getrange_and_substr_follow_redis_index_rules() {
    let s = server();
    let mut c = s.connect();
    c.ok("SET s Hello", OK);
    for (range, want) in [
        ("0 -1", "Hello"),
        ("0 0", "H"),
        ("1 3", "ell"),
        ("-3 -1", "llo"),
        ("-1 -3", ""),
        ("3 1", ""),
        ("0 100", "Hello"),
        ("-100 1", "He"),
        ("-100 -100", "H"),
        ("5 10", ""),
        ("4 4", "o"),
        ("-9223372036854775808 9223372036854775807", "Hello"),
    ] {
        c.ok(&format!("GETRANGE s {range}"), &bulk(want));
        c.ok(&format!("SUBSTR s {range}"), &bulk(want));
    }
    c.ok("GETRANGE nokey 0 -1", &bulk(""));
    assert_eq!(c.cmd(&[b"SET", b"empty", b""]), OK.as_bytes());
    c.ok("GETRANGE empty 0 -1", &bulk(""));
    c.ok("GETRANGE s a 1", NOT_INT);
    c.ok("GETRANGE s 0 1.5", NOT_INT);
    c.ok("GETRANGE s 0", &arity("getrange"));
    c.ok("SUBSTR s 0 1 2", &arity("substr"));
}

#[test]
fn msetnx_sets_all_or_none() {
    let s = server();
    let mut c = s.connect();
    c.ok("MSETNX a 1 b 2", &int(1));
    c.ok("MGET a b", "*2\r\n$1\r\n1\r\n$1\r\n2\r\n");
    // One existing key: nothing is written.
    c.ok("MSETNX c 3 a 9", &int(0));
    c.ok("MGET a c", "*2\r\n$1\r\n1\r\n$-1\r\n");
    c.ok("MSETNX a", &arity("msetnx"));
    c.ok("MSETNX a 1 b", &arity("msetnx"));
    c.ok(&format!("MSETNX x 1 y {}", big_value()), VALUE_TOO_LARGE);
    c.ok("EXISTS x y", &int(0));
    // An expired key counts as absent.
    c.ok("PSETEX gone 1 v", OK);
    std::thread::sleep(std::time::Duration::from_millis(20));
    c.ok("MSETNX gone 1", &int(1));
    // Inside MULTI, it sees the transaction's earlier writes.
    c.ok("MULTI", OK);
    c.ok("SET m 1", "+QUEUED\r\n");
    c.ok("MSETNX m 2 n 2", "+QUEUED\r\n");
    c.ok("MSETNX n 3", "+QUEUED\r\n");
    c.ok("EXEC", "*3\r\n+OK\r\n:0\r\n:1\r\n");
    c.ok("MGET m n", "*2\r\n$1\r\n1\r\n$1\r\n3\r\n");
}

#[test]
fn touch_expiretime_and_pexpiretime() {
    let s = server();
    let mut c = s.connect();
    c.ok("SET a 1", OK);
    c.ok("TOUCH a a nokey", &int(2));
    c.ok("TOUCH", &arity("touch"));
    c.ok("EXPIRETIME a", &int(-1));
    c.ok("PEXPIRETIME a", &int(-1));
    c.ok("EXPIRETIME nokey", &int(-2));
    c.ok("PEXPIRETIME nokey", &int(-2));
    c.ok("PEXPIREAT a 33177600000499", &int(1));
    c.ok("PEXPIRETIME a", &int(33_177_600_000_499));
    c.ok("EXPIRETIME a", &int(33_177_600_000));
    c.ok("PEXPIREAT a 33177600000500", &int(1));
    c.ok("EXPIRETIME a", &int(33_177_600_001));
    c.ok("EXPIRETIME", &arity("expiretime"));
    c.ok("PEXPIRETIME a b", &arity("pexpiretime"));
}

#[test]
fn rename_renamenx_and_copy() {
    let s = server();
    let mut c = s.connect();
    c.ok("SET a 1", OK);
    c.ok("EXPIRE a 100", &int(1));
    c.ok("RENAME a b", OK);
    c.ok("EXISTS a", &int(0));
    c.ok("GET b", &bulk("1"));
    let ttl = as_int(&c.q("TTL b"));
    assert!(
        (99..=100).contains(&ttl),
        "the expiry moved with the value: {ttl}"
    );
    c.ok("SET c 3", OK);
    c.ok("RENAME b c", OK);
    c.ok("GET c", &bulk("1"));
    c.ok("RENAME c c", OK);
    c.ok("GET c", &bulk("1"));
    c.ok("RENAME nokey x", &err("ERR no such key"));
    c.ok("RENAMENX nokey x", &err("ERR no such key"));
    c.ok("SET d 4", OK);
    c.ok("RENAMENX c d", &int(0));
    c.ok("RENAMENX c c", &int(0));
    c.ok("RENAMENX c e", &int(1));
    c.ok("MGET c d e", "*3\r\n$-1\r\n$1\r\n4\r\n$1\r\n1\r\n");
    // COPY keeps the source; REPLACE overwrites; DB 0 is the only one.
    c.ok("COPY e f", &int(1));
    c.ok("COPY e f", &int(0));
    c.ok("COPY d f REPLACE", &int(1));
    c.ok("COPY d g DB 0", &int(1));
    c.ok(
        "MGET d e f g",
        "*4\r\n$1\r\n4\r\n$1\r\n1\r\n$1\r\n4\r\n$1\r\n4\r\n",
    );
    c.ok("COPY nokey h", &int(0));
    c.ok(
        "COPY d d",
        &err("ERR source and destination objects are the same"),
    );
    c.ok("COPY d h DB 1", &err("ERR DB index is out of range"));
    c.ok("COPY d h DB x", NOT_INT);
    c.ok("COPY d h BOGUS", SYNTAX);
    c.ok("COPY d h DB", SYNTAX);
    c.ok("COPY d", &arity("copy"));
    c.ok("RENAME a", &arity("rename"));
    c.ok("RENAMENX a b c", &arity("renamenx"));
    c.ok(&format!("RENAME d {}", long_key()), KEY_TOO_LONG);
    c.ok("GET d", &bulk("4"));
    // Inside a transaction, after its own write.
    c.ok("MULTI", OK);
    c.ok("SET t1 x", "+QUEUED\r\n");
    c.ok("RENAME t1 t2", "+QUEUED\r\n");
    c.ok("GET t2", "+QUEUED\r\n");
    c.ok("EXEC", &["*3\r\n", OK, OK, &bulk("x")].concat());
}

#[test]
fn setrange_setbit_getbit_and_bitcount() {
    let s = server();
    let mut c = s.connect();
    // SETRANGE: zero padding, overwrite, growth; the expiry stays.
    c.ok("SETRANGE r 2 ab", &int(4));
    assert_eq!(c.cmd(&[b"GET", b"r"]), b"$4\r\n\0\0ab\r\n");
    c.ok("SET k1 Hello", OK);
    c.ok("EXPIRE k1 100", &int(1));
    c.ok("SETRANGE k1 1 ipp", &int(5));
    assert_eq!(c.cmd(&[b"SETRANGE", b"k1", b"5", b" world"]), b":11\r\n");
    c.ok("GET k1", &bulk("Hippo world"));
    let ttl = as_int(&c.q("TTL k1"));
    assert!((99..=100).contains(&ttl), "ttl {ttl}");
    assert_eq!(c.cmd(&[b"SETRANGE", b"k1", b"0", b""]), b":11\r\n");
    assert_eq!(c.cmd(&[b"SETRANGE", b"nokey", b"3", b""]), b":0\r\n");
    c.ok("EXISTS nokey", &int(0));
    c.ok("SETRANGE k1 -1 x", &err("ERR offset is out of range"));
    c.ok("SETRANGE k1 x x", NOT_INT);
    c.ok("SETRANGE k1 1024 x", VALUE_TOO_LARGE);
    c.ok("SETRANGE k1 1023 x", &int(1024));
    c.ok("SETRANGE k1 1", &arity("setrange"));
    // SETBIT / GETBIT: bit 0 is the top bit of byte 0.
    c.ok("SETBIT b 7 1", &int(0));
    c.ok("SETBIT b 7 1", &int(1));
    c.ok("GET b", &bulk("\u{1}"));
    c.ok("GETBIT b 7", &int(1));
    c.ok("GETBIT b 6", &int(0));
    c.ok("GETBIT b 100", &int(0));
    c.ok("GETBIT nokey 0", &int(0));
    c.ok("SETBIT b 7 0", &int(1));
    c.ok("SETBIT b 9 1", &int(0));
    c.ok("STRLEN b", &int(2));
    let bad_offset = err("ERR bit offset is not an integer or out of range");
    for off in ["-1", "4294967296", "x"] {
        c.ok(&format!("SETBIT b {off} 1"), &bad_offset);
        c.ok(&format!("GETBIT b {off}"), &bad_offset);
    }
    for bit in ["2", "-1", "x", "01"] {
        c.ok(
            &format!("SETBIT b 1 {bit}"),
            &err("ERR bit is not an integer or out of range"),
        );
    }
    c.ok("SETBIT b 8192 1", VALUE_TOO_LARGE);
    c.ok("SETBIT b 1", &arity("setbit"));
    c.ok("GETBIT b", &arity("getbit"));
    // BITCOUNT, Redis's documented examples.
    c.ok("SET mykey foobar", OK);
    c.ok("BITCOUNT mykey", &int(26));
    c.ok("BITCOUNT mykey 0 0", &int(4));
    c.ok("BITCOUNT mykey 1 1", &int(6));
    c.ok("BITCOUNT mykey 1 1 BYTE", &int(6));
    c.ok("BITCOUNT mykey 5 30 BIT", &int(17));
    c.ok("BITCOUNT mykey -2 -1", &int(7));
    c.ok("BITCOUNT nokey", &int(0));
    c.ok("BITCOUNT nokey 0 -1", &int(0));
    c.ok("BITCOUNT mykey 0", SYNTAX);
    c.ok("BITCOUNT mykey 0 1 BOGUS", SYNTAX);
    c.ok("BITCOUNT mykey 0 1 BIT x", SYNTAX);
    c.ok("BITCOUNT mykey a 1", NOT_INT);
    c.ok("BITCOUNT", &arity("bitcount"));
    // Inside a transaction, reading its own writes.
    c.ok("MULTI", OK);
    c.ok("SETBIT t 0 1", "+QUEUED\r\n");
    c.ok("BITCOUNT t", "+QUEUED\r\n");
    c.ok("SETRANGE t 1 ab", "+QUEUED\r\n");
    c.ok("GETBIT t 0", "+QUEUED\r\n");
    c.ok("EXEC", "*4\r\n:0\r\n:1\r\n:3\r\n:1\r\n");
}

#[test]
fn bitpos_finds_the_first_set_or_clear_bit() {
    let s = server();
    let mut c = s.connect();
    // Redis's documented examples.
    c.cmd(&[b"SET", b"mykey", b"\xff\xf0\x00"]);
    c.ok("BITPOS mykey 0", &int(12));
    c.cmd(&[b"SET", b"mykey", b"\x00\xff\xf0"]);
    c.ok("BITPOS mykey 1 0", &int(8));
    c.ok("BITPOS mykey 1 2", &int(16));
    c.ok("BITPOS mykey 1 2 -1 BYTE", &int(16));
    c.ok("BITPOS mykey 1 7 15 BIT", &int(8));
    c.ok("BITPOS mykey 1 7 -3 bit", &int(8));
    c.cmd(&[b"SET", b"mykey", b"\x00\x00\x00"]);
    c.ok("BITPOS mykey 1", &int(-1));
    // No clear bit: the bit past the end, unless an end was given.
    c.cmd(&[b"SET", b"ones", b"\xff\xff"]);
    c.ok("BITPOS ones 0", &int(16));
    c.ok("BITPOS ones 0 1", &int(16));
    c.ok("BITPOS ones 0 0 -1", &int(-1));
    c.ok("BITPOS ones 1 5 3", &int(-1));
    // An absent key is all zero bits; its arguments are still checked.
    c.ok("BITPOS nokey 0", &int(0));
    c.ok("BITPOS nokey 1", &int(-1));
    c.ok("BITPOS nokey 0 1 hello hello2", NOT_INT);
    c.ok("BITPOS nokey 0 0 1 hello", SYNTAX);
    c.ok("BITPOS ones 0 1 hello hello2", NOT_INT);
    c.ok("BITPOS ones 0 0 1 hello", SYNTAX);
    c.ok("BITPOS ones 0 0 1 BIT x", SYNTAX);
    c.ok(
        "BITPOS ones 2",
        &err("ERR The bit argument must be 1 or 0."),
    );
    c.ok("BITPOS ones x", NOT_INT);
    c.ok("BITPOS ones", &arity("bitpos"));
    c.ok("MULTI", OK);
    c.ok("SETBIT t 9 1", "+QUEUED\r\n");
    c.ok("BITPOS t 1", "+QUEUED\r\n");
    c.ok("EXEC", "*2\r\n:0\r\n:9\r\n");
}

#[test]
fn incrbyfloat_adds_exact_decimals() {
    let s = server();
    let mut c = s.connect();
    // The command reference's example.
    c.ok("SET mykey 10.50", OK);
    c.ok("INCRBYFLOAT mykey 0.1", &bulk("10.6"));
    c.ok("INCRBYFLOAT mykey -5", &bulk("5.6"));
    c.ok("SET mykey 5.0e3", OK);
    c.ok("INCRBYFLOAT mykey 2.0e2", &bulk("5200"));
    c.ok("GET mykey", &bulk("5200"));
    // Redis's tests.
    c.ok("INCRBYFLOAT novar 1", &bulk("1"));
    c.ok("INCRBYFLOAT novar 0.25", &bulk("1.25"));
    c.ok("SET novar 1.5", OK);
    c.ok("INCRBYFLOAT novar 1.5", &bulk("3"));
    c.ok("SET novar 17179869184", OK);
    c.ok("INCRBYFLOAT novar 1.5", &bulk("17179869185.5"));
    c.ok("SET novar 17179869184", OK);
    c.ok("INCRBYFLOAT novar 17179869184", &bulk("34359738368"));
    c.ok("SET foo 0", OK);
    // 17 decimal places, half to even; no negative zero.
    c.ok(
        "INCRBYFLOAT foo 0.024390243902439025",
        &bulk("0.02439024390243902"),
    );
    c.ok("INCRBYFLOAT foo -0.024390243902439025", &bulk("0"));
    // The expiry stays.
    c.ok("SET e 1 EX 100", OK);
    c.ok("INCRBYFLOAT e 1e-3", &bulk("1.001"));
    let ttl = as_int(&c.q("TTL e"));
    assert!((99..=100).contains(&ttl), "ttl {ttl}");
    // Errors, each leaving the value as it was.
    let not_float = &err("ERR value is not a valid float");
    assert_eq!(c.cmd(&[b"SET", b"sp", b" 11"]), b"+OK\r\n",);
    c.ok("INCRBYFLOAT sp 1", not_float);
    c.ok("SET s abc", OK);
    c.ok("INCRBYFLOAT s 1", not_float);
    c.ok("INCRBYFLOAT foo abc", not_float);
    c.ok("INCRBYFLOAT foo nan", not_float);
    c.ok("INCRBYFLOAT foo 1e5000", not_float);
    c.ok(
        "INCRBYFLOAT foo +inf",
        &err("ERR increment would produce NaN or Infinity"),
    );
    c.ok(
        "INCRBYFLOAT foo -inf",
        &err("ERR increment would produce NaN or Infinity"),
    );
    assert_eq!(c.cmd(&[b"INCRBYFLOAT", b"foo", b""]), not_float.as_bytes());
    c.ok("GET foo", &bulk("0"));
    c.ok("GET s", &bulk("abc"));
    c.ok("INCRBYFLOAT foo", &arity("incrbyfloat"));
    c.ok("MULTI", OK);
    c.ok("INCRBYFLOAT m 1.5", "+QUEUED\r\n");
    c.ok("INCRBYFLOAT m 1.5", "+QUEUED\r\n");
    c.ok("INCRBYFLOAT s 1", "+QUEUED\r\n");
    c.ok(
        "EXEC",
        "*3\r\n$3\r\n1.5\r\n$1\r\n3\r\n-ERR value is not a valid float\r\n",
    );
}

#[test]
fn lcs_answers_the_string_its_length_or_its_matches() {
    let s = server();
    let mut c = s.connect();
    // The command reference's examples.
    c.ok("MSET key1 ohmytext key2 mynewtext", OK);
    c.ok("LCS key1 key2", &bulk("mytext"));
    c.ok("LCS key1 key2 LEN", &int(6));
    let matches = "*4\r\n$7\r\nmatches\r\n*2\r\n\
        *2\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n\
        *2\r\n*2\r\n:2\r\n:3\r\n*2\r\n:0\r\n:1\r\n\
        $3\r\nlen\r\n:6\r\n";
    c.ok("LCS key1 key2 IDX", matches);
    c.ok(
        "LCS key1 key2 IDX MINMATCHLEN 4 WITHMATCHLEN",
        "*4\r\n$7\r\nmatches\r\n*1\r\n\
         *3\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n:4\r\n\
         $3\r\nlen\r\n:6\r\n",
    );
    c.ok("LCS key1 key2 IDX MINMATCHLEN -3", matches);
    // Absent keys are empty strings.
    c.ok("LCS key1 nokey", &bulk(""));
    c.ok("LCS nokey nokey2 LEN", &int(0));
    // Errors.
    c.ok(
        "LCS key1 key2 LEN IDX",
        &err("ERR If you want both the length and indexes, please just use IDX."),
    );
    c.ok("LCS key1 key2 MINMATCHLEN", SYNTAX);
    c.ok("LCS key1 key2 MINMATCHLEN x", NOT_INT);
    c.ok("LCS key1 key2 BOGUS", SYNTAX);
    c.ok("LCS key1", &arity("lcs"));
    // The table's memory is bounded as a request is.
    let big = "x".repeat(1000);
    c.ok(&format!("MSET b1 {big} b2 {big}"), OK);
    c.ok("LCS b1 b2 LEN", &int(1000));
    // RESP3: IDX answers a map; inside a transaction, the reads see it.
    c.q("HELLO 3");
    c.ok(
        "LCS key1 key2 IDX MINMATCHLEN 4",
        "%2\r\n$7\r\nmatches\r\n*1\r\n\
         *2\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n\
         $3\r\nlen\r\n:6\r\n",
    );
    c.ok("MULTI", OK);
    c.ok("SET key2 ohtext", "+QUEUED\r\n");
    c.ok("LCS key1 key2", "+QUEUED\r\n");
    c.ok("EXEC", "*2\r\n+OK\r\n$6\r\nohtext\r\n");
}

#[test]
fn lcs_refuses_a_table_over_max_request_bytes() {
    let s = TestServer::start(ServerConfig {
        max_request_bytes: ByteSize(1 << 20),
        ..config()
    });
    let mut c = s.connect();
    let big = "x".repeat(600);
    c.ok(&format!("MSET a {big} b {big}"), OK);
    // 601 x 601 cells of 4 bytes: 1.4 MB, over 1 MiB.
    c.ok(
        "LCS a b",
        &err("ERR Insufficient memory, transient memory for LCS exceeds max-request-bytes"),
    );
    c.ok(
        "LCS a b LEN",
        &err("ERR Insufficient memory, transient memory for LCS exceeds max-request-bytes"),
    );
    c.ok("SET b xxx", OK);
    c.ok("LCS a b", &bulk("xxx"));
}
