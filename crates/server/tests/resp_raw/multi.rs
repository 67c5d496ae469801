//! MULTI, EXEC, DISCARD, WATCH, UNWATCH: queued replies, the array EXEC
//! answers, EXECABORT after a refusal while queuing, WATCH aborting with a
//! null array, Redis 7's error texts, and reads inside a transaction that
//! see its own earlier writes.

use combkv_server::{ByteSize, ServerConfig};

use crate::wire::*;

const QUEUED: &str = "+QUEUED\r\n";
const EXECABORT: &str = "-EXECABORT Transaction discarded because of previous errors.\r\n";

#[test]
fn exec_answers_each_queued_command_in_order() {
    let s = server();
    let mut c = s.connect();
    c.ok("SET a 1", OK);
    c.ok("MULTI", OK);
    for cmd in [
        "INCR a",
        "GET a",
        "SET b x",
        "MGET a b nosuch",
        "EXISTS a b nosuch",
        "STRLEN b",
        "TYPE b",
        "TTL a",
        "GETV nosuch",
        "PING",
        "ECHO hi",
        "INCR b",
        "DEL a",
        "GET a",
        "MSET m1 1 m2 2",
        "GETDEL m1",
        "APPEND m2 3",
    ] {
        c.ok(cmd, QUEUED);
    }
    let want = [
        "*17\r\n",
        ":2\r\n",
        &bulk("2"),
        OK,
        "*3\r\n$1\r\n2\r\n$1\r\nx\r\n$-1\r\n",
        ":2\r\n",
        ":1\r\n",
        "+string\r\n",
        ":-1\r\n",
        NIL_ARRAY,
        "+PONG\r\n",
        &bulk("hi"),
        // A command's own failure is its reply; the others still apply.
        NOT_INT,
        ":1\r\n",
        NIL,
        OK,
        &bulk("1"),
        ":2\r\n",
    ]
    .concat();
    c.ok("EXEC", &want);
    c.ok("GET b", &bulk("x"));
    c.ok("GET m2", &bulk("23"));
    c.ok("EXISTS a m1", &int(0));
    // An empty transaction is an empty array.
    c.ok("MULTI", OK);
    c.ok("EXEC", "*0\r\n");
}

#[test]
fn a_refusal_while_queuing_aborts_exec_and_changes_nothing() {
    let s = server();
    let mut c = s.connect();
    for bad in [
        "NOSUCHCMD x",
        "GET",
        "SET k",
        "SAVE",
        "SCAN 0",
        "FLUSHALL",
        "SNAPSHOT 10",
    ] {
        c.ok("MULTI", OK);
        c.ok("SET k queued", QUEUED);
        let reply = c.q(bad);
        assert!(reply.starts_with("-ERR "), "{bad}: {reply}");
        c.ok("EXEC", EXECABORT);
        c.ok("GET k", NIL);
    }
    c.ok("MULTI", OK);
    c.ok(
        "SCAN 0",
        &err("ERR Command not allowed inside a transaction"),
    );
    c.ok("DISCARD", OK);
    // The state is gone after EXECABORT: no transaction is open.
    c.ok("EXEC", &err("ERR EXEC without MULTI"));
}

#[test]
fn transaction_errors_use_redis_texts() {
    let s = server();
    let mut c = s.connect();
    c.ok("EXEC", &err("ERR EXEC without MULTI"));
    c.ok("DISCARD", &err("ERR DISCARD without MULTI"));
    c.ok("MULTI x", &arity("multi"));
    c.ok("EXEC x", &arity("exec"));
    c.ok("WATCH", &arity("watch"));
    c.ok("UNWATCH x", &arity("unwatch"));
    c.ok("MULTI", OK);
    // Neither of these fails the transaction (as in Redis).
    c.ok("MULTI", &err("ERR MULTI calls can not be nested"));
    c.ok("WATCH k", &err("ERR WATCH inside MULTI is not allowed"));
    c.ok("SET k v", QUEUED);
    c.ok("EXEC", &["*1\r\n", OK].concat());
    // DISCARD drops the queue and the watches.
    c.ok("MULTI", OK);
    c.ok("SET k discarded", QUEUED);
    c.ok("DISCARD", OK);
    c.ok("GET k", &bulk("v"));
    c.ok(&format!("WATCH {}", long_key()), KEY_TOO_LONG);
}

#[test]
fn a_changed_watched_key_makes_exec_answer_null() {
    let s = server();
    let mut c = s.connect();
    let mut other = s.connect();
    c.ok("SET w 1", OK);
    // Unchanged: applied.
    c.ok("WATCH w absent", OK);
    c.ok("MULTI", OK);
    c.ok("INCR w", QUEUED);
    c.ok("EXEC", "*1\r\n:2\r\n");
    // Changed by another client, even to the same value: aborted.
    c.ok("WATCH w", OK);
    other.ok("SET w 2", OK);
    c.ok("MULTI", OK);
    c.ok("INCR w", QUEUED);
    c.ok("EXEC", NIL_ARRAY);
    c.ok("GET w", &bulk("2"));
    // Changed by the same client before MULTI: aborted too.
    c.ok("WATCH w", OK);
    c.ok("SET w 5", OK);
    c.ok("MULTI", OK);
    c.ok("INCR w", QUEUED);
    c.ok("EXEC", NIL_ARRAY);
    // A watched absent key that appears, or one deleted: aborted.
    c.ok("WATCH fresh", OK);
    other.ok("SET fresh 1", OK);
    c.ok("MULTI", OK);
    c.ok("SET t 1", QUEUED);
    c.ok("EXEC", NIL_ARRAY);
    c.ok("WATCH fresh", OK);
    other.ok("DEL fresh", &int(1));
    c.ok("MULTI", OK);
    c.ok("SET t 1", QUEUED);
    c.ok("EXEC", NIL_ARRAY);
    c.ok("EXISTS t", &int(0));
    // EXEC forgets the watches, and so does UNWATCH.
    c.ok("WATCH w", OK);
    c.ok("UNWATCH", OK);
    other.ok("SET w 9", OK);
    c.ok("MULTI", OK);
    c.ok("GET w", QUEUED);
    c.ok("EXEC", &["*1\r\n", &bulk("9")].concat());
    // A key that expires while watched has changed.
    c.ok("PSETEX short 30 v", OK);
    c.ok("WATCH short", OK);
    std::thread::sleep(std::time::Duration::from_millis(60));
    c.ok("MULTI", OK);
    c.ok("SET t 1", QUEUED);
    c.ok("EXEC", NIL_ARRAY);
    // RESP3's null.
    assert!(c.q("HELLO 3").starts_with('%'));
    c.ok("WATCH w", OK);
    other.ok("SET w 10", OK);
    c.ok("MULTI", OK);
    c.ok("EXEC", "_\r\n");
}

#[test]
fn queued_reads_are_not_batched_and_see_the_transactions_writes() {
    let s = server();
    let mut c = s.connect();
    // One pipeline: the GETs after MULTI are queued, not answered from
    // the read engine's batch before the writes.
    c.send(
        &[
            encode(&[b"SET", b"p", b"old"]),
            encode(&[b"MULTI"]),
            encode(&[b"GET", b"p"]),
            encode(&[b"SET", b"p", b"new"]),
            encode(&[b"GET", b"p"]),
            encode(&[b"EXEC"]),
            encode(&[b"GET", b"p"]),
        ]
        .concat(),
    );
    let replies: Vec<String> = (0..7).map(|_| c.reply_str()).collect();
    assert_eq!(
        replies,
        [
            OK.to_string(),
            OK.to_string(),
            QUEUED.to_string(),
            QUEUED.to_string(),
            QUEUED.to_string(),
            ["*3\r\n", &bulk("old"), OK, &bulk("new")].concat(),
            bulk("new"),
        ]
    );
}

#[test]
fn a_transaction_past_max_request_bytes_is_refused() {
    let s = TestServer::start(ServerConfig {
        max_request_bytes: ByteSize(4096),
        ..config()
    });
    let mut c = s.connect();
    c.ok("MULTI", OK);
    let value = "v".repeat(900);
    let mut refused = false;
    for i in 0..10 {
        let reply = c.q(&format!("SET k{i} {value}"));
        if reply.starts_with("-ERR the transaction's queued commands") {
            refused = true;
            break;
        }
        assert_eq!(reply, QUEUED);
    }
    assert!(refused, "a transaction grew past max-request-bytes");
    c.ok("EXEC", EXECABORT);
    c.ok("EXISTS k0", &int(0));
}

#[test]
fn queued_commands_are_checked_for_auth_and_arity_before_exec() {
    let s = TestServer::start(ServerConfig {
        requirepass: Some("pw".into()),
        ..config()
    });
    let mut c = s.connect();
    c.ok("MULTI", &err("NOAUTH Authentication required."));
    c.ok("AUTH pw", OK);
    c.ok("MULTI", OK);
    c.ok("SET a", &arity("set"));
    c.ok("SET a 1", QUEUED);
    c.ok("EXEC", EXECABORT);
    c.ok("GET a", NIL);
}

#[test]
fn compare_conditions_gate_exec_and_answer_alone() {
    let s = server();
    let mut c = s.connect();
    c.ok("MSET a 1 b 2 c 3 x outside", OK);
    let va = as_int(
        &c.q("GETV a")
            .split("\r\n")
            .nth(3)
            .map(|v| format!("{v}\r\n"))
            .unwrap(),
    );
    // Alone: 1 or 0.
    c.ok(&format!("COMPARE a VERSION = {va}"), &int(1));
    c.ok(&format!("COMPARE a VERSION > {va}"), &int(0));
    c.ok("COMPARE nokey VERSION = 0", &int(1));
    c.ok("COMPARE b VALUE = 2", &int(1));
    c.ok("COMPARE b VALUE >= 3", &int(0));
    c.ok("COMPARE nokey VALUE != x", &int(0));
    c.ok("COMPARE RANGE [a (d COUNT = 3", &int(1));
    c.ok("COMPARE RANGE [a (d COUNT > 3", &int(0));
    c.ok("COMPARE RANGE - + COUNT = 4", &int(1));
    c.ok(&format!("COMPARE RANGE [a (d MAXVERSION >= {va}"), &int(1));
    c.ok("COMPARE RANGE [a (d MAXVERSION = 0", &int(0));
    c.ok("COMPARE RANGE [q (r MAXVERSION = 0", &int(1));
    // In a transaction: all hold, everything applies.
    c.ok("MULTI", OK);
    c.ok("COMPARE b VALUE = 2", QUEUED);
    c.ok("COMPARE RANGE [a (d COUNT = 3", QUEUED);
    c.ok("SET d 4", QUEUED);
    c.ok("INCR a", QUEUED);
    c.ok("EXEC", "*4\r\n:1\r\n:1\r\n+OK\r\n:2\r\n");
    // One fails (d was written into [a, d]): nothing applies, EXEC
    // answers null.
    c.ok("MULTI", OK);
    c.ok("COMPARE b VALUE = 2", QUEUED);
    c.ok("COMPARE RANGE [a [d COUNT = 3", QUEUED);
    c.ok("SET e 5", QUEUED);
    c.ok("EXEC", NIL_ARRAY);
    c.ok("EXISTS e", &int(0));
    // A COMPARE after a data command fails the transaction.
    c.ok("MULTI", OK);
    c.ok("PING", QUEUED);
    c.ok("SET e 5", QUEUED);
    c.ok(
        "COMPARE b VALUE = 2",
        &err("ERR COMPARE must come before the transaction's other data commands"),
    );
    c.ok("EXEC", EXECABORT);
    c.ok("EXISTS e", &int(0));
    // Errors.
    c.ok(
        "COMPARE a VERSION ~ 1",
        &err("ERR unknown comparison '~' (=, !=, <, <=, >, >=)"),
    );
    c.ok("COMPARE a VERSION = -1", NOT_INT);
    c.ok("COMPARE a VERSION = x", NOT_INT);
    c.ok("COMPARE a BOGUS = 1", SYNTAX);
    c.ok("COMPARE RANGE [a (d BOGUS = 1", SYNTAX);
    c.ok("COMPARE RANGE a (d COUNT = 1", BAD_BOUND);
    // Bounds that admit no key: an empty range.
    c.ok("SET \0 nul", OK);
    c.ok("COMPARE RANGE + + COUNT = 0", &int(1));
    c.ok("COMPARE RANGE + - COUNT > 0", &int(0));
    c.ok("COMPARE RANGE - - MAXVERSION = 0", &int(1));
    c.ok("COMPARE RANGE [a (a COUNT = 0", &int(1));
    c.ok("COMPARE a VERSION =", &arity("compare"));
    c.ok("COMPARE a VERSION = 1 2", &arity("compare"));
    c.ok(&format!("COMPARE {} VALUE = 1", long_key()), KEY_TOO_LONG);
}

#[test]
fn ordered_reads_inside_exec_see_the_transactions_writes() {
    let s = server();
    let mut c = s.connect();
    c.ok("MSET a 1 c 3 e 5", OK);
    let snap = as_int(&c.q("SNAPSHOT CREATE"));
    c.ok("MULTI", OK);
    for cmd in [
        "SET b 2",
        "DEL e",
        "RANGE - +",
        "RANGE [b + KEYSONLY LIMIT 1 REV",
        "FLOOR bb",
        "CEIL bb",
        "KEYS *",
        "DBSIZE",
        &format!("GETAT {snap} b"),
        &format!("RANGEAT {snap} - + KEYSONLY"),
        "DEL a b c",
        "RANGE - +",
        "FLOOR z",
        "DBSIZE",
    ] {
        c.ok(cmd, QUEUED);
    }
    let want = [
        "*14\r\n",
        OK,
        &int(1),
        &bulks(&["a", "1", "b", "2", "c", "3"]),
        &bulks(&["c"]),
        &bulks(&["b", "2"]),
        &bulks(&["c", "3"]),
        &bulks(&["a", "b", "c"]),
        &int(3),
        // A snapshot reads as it did before the transaction.
        NIL,
        &bulks(&["a", "c", "e"]),
        &int(3),
        "*0\r\n",
        NIL_ARRAY,
        &int(0),
    ]
    .concat();
    c.ok("EXEC", &want);
    c.ok("DBSIZE", &int(0));
    // A reply over max-reply-bytes is that command's error, and the
    // transaction's writes still apply.
    let big = "v".repeat(1000);
    let s = TestServer::start(ServerConfig {
        max_reply_bytes: ByteSize(4096),
        ..config()
    });
    let mut c = s.connect();
    for i in 0..8 {
        c.ok(&format!("SET big{i} {big}"), OK);
    }
    c.ok("MULTI", OK);
    c.ok("SET after 1", QUEUED);
    c.ok("RANGE - +", QUEUED);
    c.ok("RANGE - + KEYSONLY", QUEUED);
    let reply = c.q("EXEC");
    assert!(reply.starts_with("*3\r\n+OK\r\n-ERR "), "{reply}");
    assert!(
        reply.ends_with(&bulks(&[
            "after", "big0", "big1", "big2", "big3", "big4", "big5", "big6", "big7"
        ])),
        "{reply}"
    );
}
