//! Redis's strict reading of numbers and header lines: multibulk header
//! lines end at CR (a bare LF does not end one), and every integer argument
//! and stored number follows `string2ll` (no '+', no leading zeros, no
//! spaces, no "-0"). Each case's exact reply is checked here, and the same
//! bytes are sent to a real redis-server 7 to check that it answers alike.

use crate::peer::{exchange, redis, replies};
use crate::wire::*;

const NOT_INT: &str = "-ERR value is not an integer or out of range\r\n";

fn proto(m: &str) -> String {
    err(&format!("ERR Protocol error: {m}"))
}

/// Raw requests whose whole answer is known: (request, reply, then closed).
fn framing_cases() -> Vec<(&'static [u8], String, bool)> {
    vec![
        // A bare LF ends no header line: the request waits for a CR.
        (b"*1\n$4\nPING\n", String::new(), false),
        // The CR that comes is inside the next line: the count is not a number.
        (b"*1\n$4\nPING\r\n", proto("invalid multibulk length"), true),
        (b"*1\r\n$4\nPING\r\n", proto("invalid bulk length"), true),
        (
            b"*2\r\n$3\nGET\r\n$1\r\nk\r\n",
            proto("invalid bulk length"),
            true,
        ),
        // The data of a bulk string still needs its two trailing bytes.
        (b"*1\r\n$4\r\nPING\n", String::new(), false),
        (b"*1\r\n$4\r\nPING\r\n", "+PONG\r\n".into(), false),
        (
            b"*01\r\n$4\r\nPING\r\n",
            proto("invalid multibulk length"),
            true,
        ),
        (
            b"* 1\r\n$4\r\nPING\r\n",
            proto("invalid multibulk length"),
            true,
        ),
        (b"*-0\r\n", proto("invalid multibulk length"), true),
        (b"*1\r\n$04\r\nPING\r\n", proto("invalid bulk length"), true),
        (b"*1\r\n$+4\r\nPING\r\n", proto("invalid bulk length"), true),
        (b"*1\r\n$ 4\r\nPING\r\n", proto("invalid bulk length"), true),
        (b"*1\r\n$-0\r\n", proto("invalid bulk length"), true),
        // Inline commands may still end in LF alone.
        (b"PING\n", "+PONG\r\n".into(), false),
    ]
}

/// Commands with integer arguments, and stored values INCR must refuse.
fn integer_cases() -> Vec<(Vec<&'static str>, &'static str)> {
    let ok = "+OK\r\n";
    vec![
        (vec!["SET", "n", "5"], ok),
        (vec!["INCRBY", "n", "+1"], NOT_INT),
        (vec!["INCRBY", "n", "01"], NOT_INT),
        (vec!["INCRBY", "n", " 1"], NOT_INT),
        (vec!["INCRBY", "n", "1 "], NOT_INT),
        (vec!["INCRBY", "n", "-0"], NOT_INT),
        (vec!["DECRBY", "n", "+1"], NOT_INT),
        (vec!["DECRBY", "n", "007"], NOT_INT),
        (vec!["INCRBY", "n", "-1"], ":4\r\n"),
        (vec!["EXPIRE", "n", "+5"], NOT_INT),
        (vec!["EXPIRE", "n", "05"], NOT_INT),
        (vec!["PEXPIRE", "n", "+5"], NOT_INT),
        (vec!["EXPIREAT", "n", "+5"], NOT_INT),
        (vec!["PEXPIREAT", "n", "0100"], NOT_INT),
        (vec!["TTL", "n"], ":-1\r\n"),
        (vec!["SET", "k", "v", "EX", "010"], NOT_INT),
        (vec!["SET", "k", "v", "EX", "+10"], NOT_INT),
        (vec!["SET", "k", "v", "PX", "+10"], NOT_INT),
        (vec!["SET", "k", "v", "EXAT", "+10"], NOT_INT),
        (vec!["SET", "k", "v", "PXAT", "010"], NOT_INT),
        (vec!["EXISTS", "k"], ":0\r\n"),
        (vec!["SCAN", "0", "COUNT", "+5"], NOT_INT),
        (vec!["SCAN", "0", "COUNT", "05"], NOT_INT),
        (vec!["SELECT", "+0"], NOT_INT),
        (vec!["SELECT", "00"], NOT_INT),
        // Stored numbers are read the same way.
        (vec!["SET", "n", "+1"], ok),
        (vec!["INCR", "n"], NOT_INT),
        (vec!["DECR", "n"], NOT_INT),
        (vec!["INCRBY", "n", "1"], NOT_INT),
        (vec!["SET", "n", " 1"], ok),
        (vec!["INCR", "n"], NOT_INT),
        (vec!["SET", "n", "01"], ok),
        (vec!["INCR", "n"], NOT_INT),
        (vec!["SET", "n", "-0"], ok),
        (vec!["INCR", "n"], NOT_INT),
        (vec!["SET", "n", "1 "], ok),
        (vec!["DECRBY", "n", "1"], NOT_INT),
        (vec!["GET", "n"], "$2\r\n1 \r\n"),
        (vec!["SET", "n", "-1"], ok),
        (vec!["INCR", "n"], ":0\r\n"),
    ]
}

#[test]
fn header_lines_end_at_cr_as_in_redis() {
    let s = server();
    let addr = s.server().resp_addr().unwrap();
    for (bytes, want, closed) in framing_cases() {
        let got = exchange(addr, bytes);
        assert_eq!(
            (String::from_utf8_lossy(&got.0).into_owned(), got.1),
            (want, closed),
            "{:?}",
            String::from_utf8_lossy(bytes)
        );
    }
}

#[test]
fn integers_follow_string2ll() {
    let s = server();
    let cases = integer_cases();
    let cmds: Vec<Vec<&str>> = cases.iter().map(|(c, _)| c.clone()).collect();
    let got = replies(s.server().resp_addr().unwrap(), &cmds);
    for ((cmd, want), got) in cases.iter().zip(got) {
        assert_eq!(got, *want, "{cmd:?}");
    }
}

#[test]
fn redis_server_answers_the_same_bytes() {
    let Some(redis) = redis() else {
        return;
    };
    let s = server();
    let ours = s.server().resp_addr().unwrap();
    for (bytes, _, _) in framing_cases() {
        assert_eq!(
            exchange(ours, bytes),
            exchange(redis.1, bytes),
            "{:?}",
            String::from_utf8_lossy(bytes)
        );
    }
    let cmds: Vec<Vec<&str>> = integer_cases().into_iter().map(|(c, _)| c).collect();
    let theirs = replies(redis.1, &cmds);
    for ((cmd, ours), theirs) in cmds.iter().zip(replies(ours, &cmds)).zip(theirs) {
        assert_eq!(ours, theirs, "{cmd:?}");
    }
}
