//! Authentication (requirepass, AUTH, HELLO AUTH), maxmemory, maxclients.

use std::time::{Duration, Instant};

use combkv_server::ByteSize;

use crate::wire::*;

pub(crate) const NOAUTH: &str = "-NOAUTH Authentication required.\r\n";
pub(crate) const WRONGPASS: &str =
    "-WRONGPASS invalid username-password pair or user is disabled.\r\n";

fn with_password() -> TestServer {
    let mut cfg = config();
    cfg.requirepass = Some("s3cret".into());
    TestServer::start(cfg)
}

#[test]
fn requirepass_refuses_until_auth() {
    let s = with_password();
    let mut c = s.connect();
    c.ok("GET k", NOAUTH);
    c.ok("SET k v", NOAUTH);
    c.ok("PING", NOAUTH);
    c.ok("RANGE - + LIMIT 3", NOAUTH);
    c.ok("MGET a b", NOAUTH);
    // Redis 7's order: an unknown command or a wrong arity is reported
    // before NOAUTH.
    c.ok(
        "BOGUS x",
        &err("ERR unknown command 'BOGUS', with args beginning with: 'x' "),
    );
    c.ok("GET", &arity("get"));
    c.ok("AUTH wrong", WRONGPASS);
    c.ok("AUTH default wrong", WRONGPASS);
    c.ok("AUTH someone s3cret", WRONGPASS);
    c.ok("AUTH s3cre", WRONGPASS);
    c.ok("AUTH s3crett", WRONGPASS);
    c.ok("AUTH a b c", SYNTAX);
    c.ok(
        "HELLO 3",
        &err(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the \
             HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
             select the RESP protocol version at the same time",
        ),
    );
    c.ok("HELLO 3 AUTH default nope", WRONGPASS);
    c.ok("GET k", NOAUTH);
    c.ok("AUTH s3cret", OK);
    c.ok("SET k v", OK);
    c.ok("GET k", &bulk("v"));
    // The two-argument form with the default user.
    let mut c2 = s.connect();
    c2.ok("AUTH default s3cret", OK);
    c2.ok("GET k", &bulk("v"));
    // HELLO AUTH authenticates and switches protocol in one step.
    let mut c3 = s.connect();
    let hello = c3.q("HELLO 3 AUTH default s3cret SETNAME authed");
    assert!(hello.starts_with("%7\r\n"), "{hello}");
    c3.ok("GET nokey", "_\r\n");
    c3.ok("CLIENT GETNAME", &bulk("authed"));
    // QUIT works unauthenticated.
    let mut c4 = s.connect();
    c4.ok("QUIT", OK);
    c4.expect_closed();
}

#[test]
fn auth_in_a_pipeline_applies_to_what_follows() {
    let s = with_password();
    let mut c = s.connect();
    c.send(
        &[
            encode(&[b"GET", b"k"]),
            encode(&[b"AUTH", b"s3cret"]),
            encode(&[b"SET", b"k", b"v"]),
            encode(&[b"GET", b"k"]),
        ]
        .concat(),
    );
    assert_eq!(c.reply_str(), NOAUTH);
    assert_eq!(c.reply_str(), OK);
    assert_eq!(c.reply_str(), OK);
    assert_eq!(c.reply_str(), bulk("v"));
    // After AUTH, large requests are fine again, even in the same write.
    let mut c = s.connect();
    let mut args: Vec<&[u8]> = vec![b"MSET"];
    args.extend(std::iter::repeat_n(&b"x"[..], 20));
    c.send(&[encode(&[b"AUTH", b"s3cret"]), encode(&args)].concat());
    assert_eq!(c.reply_str(), OK);
    assert_eq!(c.reply_str(), OK);
}

#[test]
fn unauthenticated_requests_are_small() {
    let s = with_password();
    let proto = |m: &str| err(&format!("ERR Protocol error: {m}"));
    // More than 10 arguments, or a bulk string over 16 KiB, before AUTH.
    let mut c = s.connect();
    c.send(b"*11\r\n");
    assert_eq!(c.reply_str(), proto("unauthenticated multibulk length"));
    c.expect_closed();
    let mut c = s.connect();
    c.send(b"*1\r\n$16385\r\n");
    assert_eq!(c.reply_str(), proto("unauthenticated bulk length"));
    c.expect_closed();
    // At the limits: served (and refused for want of AUTH).
    let mut c = s.connect();
    let ten: Vec<&[u8]> = std::iter::repeat_n(&b"x"[..], 10).collect();
    assert_eq!(
        c.cmd(&ten),
        err("ERR unknown command 'x', with args beginning with: 'x' 'x' 'x' 'x' 'x' 'x' 'x' 'x' 'x' ")
            .as_bytes()
    );
    let big = vec![b'v'; 16384];
    assert_eq!(c.cmd(&[b"SET", b"k", &big]), NOAUTH.as_bytes());
}

#[test]
fn auth_without_requirepass() {
    let s = server();
    let mut c = s.connect();
    c.ok(
        "AUTH x",
        &err(
            "ERR AUTH <password> called without any password configured for the default user. \
             Are you sure your configuration is correct?",
        ),
    );
    // The default user is passwordless: any password authenticates it.
    c.ok("AUTH default anything", OK);
    c.ok("AUTH other anything", WRONGPASS);
    c.ok("AUTH", &arity("auth"));
}

#[test]
fn maxmemory_refuses_writes_that_add_data_and_serves_reads() {
    let mut cfg = config();
    // Any process uses more than this: every check finds memory over it.
    cfg.maxmemory = ByteSize(1);
    let s = TestServer::start(cfg);
    // Data written before the limit applies, straight through the store.
    s.server().store().put(b"k", b"v").unwrap();
    s.server().store().put(b"n", b"1").unwrap();
    let mut c = s.connect();
    let oom = "-OOM command not allowed when used memory > 'maxmemory'.\r\n";
    for line in [
        "SET k w",
        "SETNX x 1",
        "MSET a 1",
        "APPEND k x",
        "INCR n",
        "DECR n",
        "INCRBY n 2",
        "DECRBY n 2",
        "CAS k 0 x",
    ] {
        c.ok(line, oom);
    }
    // Arity and syntax are checked first.
    c.ok("SET k", &arity("set"));
    // Reads work.
    c.ok("GET k", &bulk("v"));
    c.ok("MGET k n", &bulks(&["v", "1"]));
    c.ok("RANGE - + LIMIT 5", &bulks(&["k", "v", "n", "1"]));
    c.ok("EXISTS k", &int(1));
    c.ok("DBSIZE", &int(2));
    // Writes that free memory are allowed, as in Redis (no `denyoom`).
    c.ok("EXPIRE k 100", &int(1));
    c.ok("PERSIST k", &int(1));
    c.ok("GETDEL n", &bulk("1"));
    c.ok("DEL k", &int(1));
    c.ok("FLUSHALL", OK);
    let info = c.q("INFO stats");
    assert!(info.contains("oom_rejected_writes:9\r\n"), "{info}");
    let info = c.q("INFO memory");
    assert!(info.contains("maxmemory:1\r\n"), "{info}");
}

#[test]
fn maxclients_refuses_extra_connections() {
    let mut cfg = config();
    cfg.maxclients = 2;
    let s = TestServer::start(cfg);
    let mut a = s.connect();
    let mut b = s.connect();
    a.ok("PING", "+PONG\r\n");
    b.ok("PING", "+PONG\r\n");
    let mut extra = s.connect();
    assert_eq!(extra.reply_str(), "-ERR max number of clients reached\r\n");
    extra.expect_closed();
    let info = a.q("INFO stats");
    assert!(info.contains("rejected_connections:1\r\n"), "{info}");
    // A slot frees once a client leaves (bounded polling: the server sees
    // the close on its own schedule).
    drop(b);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut c = s.connect();
        c.send(&encode(&[b"PING"]));
        let r = c.reply_str();
        if r == "+PONG\r\n" {
            break;
        }
        assert_eq!(r, "-ERR max number of clients reached\r\n");
        assert!(Instant::now() < deadline, "slot never freed");
        std::thread::sleep(Duration::from_millis(10));
    }
    a.ok("PING", "+PONG\r\n");
}
