//! Framing: protocol errors that close the connection, inline (telnet)
//! commands, pipelines, RESP3 after HELLO 3.

use crate::wire::*;

/// Sends `bytes` on a fresh connection and expects `want` and then a close.
fn closes_with(s: &TestServer, bytes: &[u8], want: &str) {
    let mut c = s.connect();
    c.send(bytes);
    assert_eq!(
        c.reply_str(),
        want,
        "reply to {:?}",
        String::from_utf8_lossy(bytes)
    );
    c.expect_closed();
}

#[test]
fn protocol_errors_reply_then_close() {
    let s = server();
    let proto = |m: &str| err(&format!("ERR Protocol error: {m}"));
    closes_with(&s, b"*x\r\n", &proto("invalid multibulk length"));
    closes_with(&s, b"*+1\r\n", &proto("invalid multibulk length"));
    closes_with(&s, b"*3000000000\r\n", &proto("invalid multibulk length"));
    // combkv's bound on arguments per request (Redis: INT_MAX).
    closes_with(&s, b"*2147483647\r\n", &proto("invalid multibulk length"));
    closes_with(&s, b"*1\r\n:3\r\n", &proto("expected '$', got ':'"));
    closes_with(
        &s,
        b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n",
        &proto("expected '$', got 'f'"),
    );
    closes_with(&s, b"*1\r\n$-1\r\n", &proto("invalid bulk length"));
    closes_with(&s, b"*1\r\n$x\r\n", &proto("invalid bulk length"));
    closes_with(&s, b"*1\r\n$01\r\nab\r\n", &proto("invalid bulk length"));
    // A declared length beyond max-request-bytes fails at once: nothing is
    // allocated for it and nothing waits for it.
    closes_with(
        &s,
        b"*1\r\n$999999999999\r\n",
        &proto("invalid bulk length"),
    );
    closes_with(
        &s,
        b"*1\r\n$9223372036854775807\r\n",
        &proto("invalid bulk length"),
    );
    // Data not followed by CRLF.
    closes_with(&s, b"*1\r\n$1\r\nab\r\n", &proto("invalid bulk length"));
    closes_with(
        &s,
        b"SET \"a\"b c\r\n",
        &proto("unbalanced quotes in request"),
    );
    closes_with(&s, b"SET 'abc\r\n", &proto("unbalanced quotes in request"));
    let mut long = vec![b'a'; 64 * 1024 + 10];
    closes_with(&s, &long, &proto("too big inline request"));
    long[0] = b'*';
    long[1..].fill(b'1');
    closes_with(&s, &long, &proto("too big mbulk count string"));
    let mut long_bulk = b"*1\r\n$".to_vec();
    long_bulk.extend(std::iter::repeat_n(b'1', 64 * 1024 + 10));
    closes_with(&s, &long_bulk, &proto("too big bulk count string"));
    // Replies to the requests before the bad one come first; nothing after
    // it runs.
    let mut c = s.connect();
    c.send(b"*1\r\n$4\r\nPING\r\nGET nokey\r\n*1\r\n$-5\r\n*1\r\n$4\r\nPING\r\n");
    assert_eq!(c.reply_str(), "+PONG\r\n");
    assert_eq!(c.reply_str(), NIL);
    assert_eq!(c.reply_str(), proto("invalid bulk length"));
    c.expect_closed();
    // The server keeps serving everyone else.
    let mut c = s.connect();
    c.ok("PING", "+PONG\r\n");
}

#[test]
fn protocol_error_after_pipelined_replies() {
    let s = server();
    let mut c = s.connect();
    c.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$-5\r\n");
    assert_eq!(c.reply_str(), OK);
    assert_eq!(c.reply_str(), bulk("v"));
    assert_eq!(
        c.reply_str(),
        err("ERR Protocol error: invalid bulk length")
    );
    c.expect_closed();
}

#[test]
fn empty_requests_are_ignored() {
    let s = server();
    let mut c = s.connect();
    c.send(b"\r\n\n   \r\n*0\r\n*-1\r\n*-10\r\n");
    c.ok("PING", "+PONG\r\n");
}

#[test]
fn inline_commands() {
    let s = server();
    let mut c = s.connect();
    c.send(b"PING\r\n");
    assert_eq!(c.reply_str(), "+PONG\r\n");
    // LF alone ends a line too (telnet, nc).
    c.send(b"SET k \"hello world\"\n");
    assert_eq!(c.reply_str(), OK);
    c.ok("GET k", &bulk("hello world"));
    c.send(b"  SET   k2   'it\\'s'  \r\n");
    assert_eq!(c.reply_str(), OK);
    c.ok("GET k2", &bulk("it's"));
    c.send(b"SET k3 \"\\x41\\n\\t\\\"q\\\"\"\r\n");
    assert_eq!(c.reply_str(), OK);
    c.ok("GET k3", &bulk("A\n\t\"q\""));
    c.send(b"ECHO \"\"\r\n");
    assert_eq!(c.reply_str(), "$0\r\n\r\n");
    c.send(b"get k\r\n");
    assert_eq!(c.reply_str(), bulk("hello world"));
    // A NUL ends an inline line, as it ends Redis's C string (it once made
    // the server loop, allocating without bound).
    c.send(b"GET k\0 junk\r\n");
    assert_eq!(c.reply_str(), bulk("hello world"));
    // Inline errors are ordinary replies.
    c.send(b"NOPE x\r\n");
    assert_eq!(
        c.reply_str(),
        err("ERR unknown command 'NOPE', with args beginning with: 'x' ")
    );
    // Inline and multibulk mixed in one write, read requests included.
    c.send(
        b"GET k\r\n*2\r\n$3\r\nGET\r\n$2\r\nk2\r\nMGET k k2\r\nRANGE [k [k2 KEYSONLY LIMIT 5\r\n",
    );
    assert_eq!(c.reply_str(), bulk("hello world"));
    assert_eq!(c.reply_str(), bulk("it's"));
    assert_eq!(c.reply_str(), bulks(&["hello world", "it's"]));
    assert_eq!(c.reply_str(), bulks(&["k", "k2"]));
}

#[test]
fn pipelines_keep_order_and_see_earlier_writes() {
    let s = server();
    let mut c = s.connect();
    let reqs: Vec<Vec<&[u8]>> = vec![
        vec![b"GET", b"a"],
        vec![b"SET", b"a", b"1"],
        vec![b"GET", b"a"],
        vec![b"INCR", b"a"],
        vec![b"MGET", b"a", b"b"],
        vec![b"GETV", b"zz"],
        vec![b"SET", b"b", b"2"],
        vec![b"RANGE", b"-", b"+", b"LIMIT", b"10"],
        vec![b"DEL", b"a"],
        vec![b"GET", b"a"],
        vec![b"RANGE", b"-", b"+", b"LIMIT", b"10", b"KEYSONLY"],
        vec![b"GET", &[b'x'; 461]],
        vec![b"GET", b"b"],
        vec![b"NOPE"],
        vec![b"GET", b"b"],
    ];
    let mut bytes = Vec::new();
    for r in &reqs {
        bytes.extend(encode(r));
    }
    let want = [
        NIL.to_string(),
        OK.to_string(),
        bulk("1"),
        int(2),
        format!("*2\r\n{}{NIL}", bulk("2")),
        NIL_ARRAY.to_string(),
        OK.to_string(),
        bulks(&["a", "2", "b", "2"]),
        int(1),
        NIL.to_string(),
        bulks(&["b"]),
        KEY_TOO_LONG.to_string(),
        bulk("2"),
        err("ERR unknown command 'NOPE', with args beginning with: "),
        bulk("2"),
    ];
    // One write.
    c.send(&bytes);
    for w in &want {
        assert_eq!(&c.reply_str(), w);
    }
    // The same pipeline a byte at a time: framing never depends on how
    // the bytes arrive.
    c.ok("FLUSHALL", OK);
    for b in &bytes {
        c.send(std::slice::from_ref(b));
    }
    for w in &want {
        assert_eq!(&c.reply_str(), w);
    }
}

#[test]
fn long_pipeline_of_mixed_reads_and_writes() {
    let s = server();
    let mut c = s.connect();
    let mut bytes = Vec::new();
    for i in 0..2000 {
        let k = format!("k{}", i % 50);
        let v = i.to_string();
        bytes.extend(encode(&[b"SET", k.as_bytes(), v.as_bytes()]));
        bytes.extend(encode(&[b"GET", k.as_bytes()]));
    }
    c.send(&bytes);
    for i in 0..2000 {
        assert_eq!(c.reply_str(), OK);
        assert_eq!(c.reply_str(), bulk(&i.to_string()));
    }
    c.ok("DBSIZE", &int(50));
}

#[test]
fn resp3_after_hello_3() {
    let s = server();
    let mut c = s.connect();
    let id = as_int(&c.q("CLIENT ID"));
    let hello2 = c.q("HELLO");
    assert_eq!(
        hello2,
        format!(
            "*14\r\n{}{}{}{}{}:2\r\n{}:{id}\r\n{}{}{}{}{}*0\r\n",
            bulk("server"),
            bulk("combkv"),
            bulk("version"),
            bulk(env!("CARGO_PKG_VERSION")),
            bulk("proto"),
            bulk("id"),
            bulk("mode"),
            bulk("standalone"),
            bulk("role"),
            bulk("master"),
            bulk("modules"),
        )
    );
    let hello3 = c.q("HELLO 3");
    assert!(hello3.starts_with("%7\r\n$6\r\nserver\r\n"), "{hello3}");
    assert!(hello3.contains(&format!("{}:3\r\n", bulk("proto"))));
    // Nulls are `_`, maps `%`, INFO and CLIENT INFO verbatim strings.
    c.ok("GET nokey", "_\r\n");
    c.ok("GETV nokey", "_\r\n");
    c.ok("FLOOR a", "_\r\n");
    c.ok("SET k v XX", "_\r\n");
    c.ok("SET k v GET", "_\r\n");
    c.ok("CAS k 99 w", "_\r\n");
    c.ok("CLIENT GETNAME", "_\r\n");
    c.ok("MGET k nokey", &format!("*2\r\n{}_\r\n", bulk("v")));
    c.ok("COMMAND INFO nope", "*1\r\n_\r\n");
    c.ok(
        "CONFIG GET max-value-bytes",
        &format!("%1\r\n{}{}", bulk("max-value-bytes"), bulk("1024")),
    );
    c.ok(
        "COMMAND DOCS get",
        &format!(
            "%1\r\n{}%5\r\n{}{}{}{}{}{}{}{}{}*1\r\n%4\r\n{}{}{}{}{}{}{}:0\r\n",
            bulk("get"),
            bulk("summary"),
            bulk("Returns the value of a key."),
            bulk("since"),
            bulk("1.0.0"),
            bulk("group"),
            bulk("string"),
            bulk("complexity"),
            bulk("O(log N) where N is the number of keys"),
            bulk("arguments"),
            bulk("name"),
            bulk("key"),
            bulk("type"),
            bulk("key"),
            bulk("display_text"),
            bulk("key"),
            bulk("key_spec_index"),
        ),
    );
    let info = c.q("INFO server");
    let body = "# Server\r\n";
    assert!(
        info.starts_with('=') && info.contains(&format!("\r\ntxt:{body}")),
        "{info}"
    );
    let len: usize = info[1..info.find("\r\n").unwrap()].parse().unwrap();
    assert_eq!(
        info.len(),
        1 + len.to_string().len() + 2 + len + 2,
        "{info}"
    );
    let ci = c.q("CLIENT INFO");
    assert!(ci.starts_with('=') && ci.contains("txt:id="), "{ci}");
    assert!(
        c.q("COMMAND INFO get")
            .contains("~2\r\n+readonly\r\n+fast\r\n")
    );
    // Pipelined reads after HELLO 3 in the same write use RESP3 too; after
    // HELLO 2 they are RESP2 again.
    c.send(
        &[
            encode(&[b"GET", b"x"]),
            encode(&[b"HELLO", b"2"]),
            encode(&[b"GET", b"x"]),
        ]
        .concat(),
    );
    assert_eq!(c.reply_str(), "_\r\n");
    assert!(c.reply_str().starts_with("*14\r\n"));
    assert_eq!(c.reply_str(), NIL);
    c.send(&[encode(&[b"HELLO", b"3"]), encode(&[b"GET", b"x"])].concat());
    assert!(c.reply_str().starts_with("%7\r\n"));
    assert_eq!(c.reply_str(), "_\r\n");
}

#[test]
fn hello_errors_and_setname() {
    let s = server();
    let mut c = s.connect();
    c.ok("HELLO 4", &err("NOPROTO unsupported protocol version"));
    c.ok("HELLO 1", &err("NOPROTO unsupported protocol version"));
    c.ok(
        "HELLO x",
        &err("ERR Protocol version is not an integer or out of range"),
    );
    c.ok(
        "HELLO 3 BOGUS",
        &err("ERR Syntax error in HELLO option 'BOGUS'"),
    );
    c.ok(
        "HELLO 3 AUTH default",
        &err("ERR Syntax error in HELLO option 'AUTH'"),
    );
    c.ok(
        "HELLO 3 SETNAME",
        &err("ERR Syntax error in HELLO option 'SETNAME'"),
    );
    assert_eq!(
        c.cmd(&[b"HELLO", b"3", b"SETNAME", b"a b"]),
        b"-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
    );
    // Errors changed nothing: still RESP2.
    c.ok("GET nokey", NIL);
    assert!(c.q("HELLO 3 SETNAME via-hello").starts_with("%7\r\n"));
    c.ok("CLIENT GETNAME", &bulk("via-hello"));
    // Without requirepass the default user takes any password.
    assert!(c.q("HELLO 2 AUTH default whatever").starts_with("*14\r\n"));
    c.ok(
        "HELLO 2 AUTH someone whatever",
        &err("WRONGPASS invalid username-password pair or user is disabled."),
    );
}

/// Reading stops at a short read (the socket is drained) unless the event
/// reports a hang-up: requests that arrive in pieces, and requests followed
/// at once by the client's half-close, are all answered, and a half-closed
/// client then sees the connection end.
#[test]
fn split_requests_and_half_close_are_served() {
    use std::io::{Read, Write};
    let s = server();
    let addr = s.server().resp_addr().unwrap();

    // A request in three pieces, with pauses that let each be read alone.
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    for piece in [&b"*3\r\n$3\r\nSET\r\n$1"[..], b"\r\nk\r\n$2\r\nv", b"1\r\n"] {
        c.write_all(piece).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(30));
    }
    let mut got = [0u8; 5];
    c.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"+OK\r\n");

    // Requests and the half-close in one go: replies, then end of stream.
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    c.write_all(b"GET k\r\nPING\r\n").unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let mut all = Vec::new();
    c.read_to_end(&mut all).unwrap();
    assert_eq!(all, b"$2\r\nv1\r\n+PONG\r\n");
}
