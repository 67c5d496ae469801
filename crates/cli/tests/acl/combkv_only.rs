//! combkv's side of users without a Redis to compare with: Redis 7.2's
//! denial counters in INFO (redis-server 7.0 has none), memcached's
//! authentication and permissions, and combkv's own RANGE.

use crate::normalise::{acl_stats, log};
use crate::support::resp::Client;
use crate::support::{self, Server};

/// Redis 7.2's INFO stats counters of denials (redis-server 7.0 has none
/// to compare with, so the counts are written out): each refused AUTH,
/// command and key counts once in its own field.
#[test]
fn info_counts_denials_as_redis_7_2() {
    let server = Server::start(&[], None);
    let mut admin = Client::connect(server.resp);
    let mut alice = Client::connect(server.resp);
    let setup = admin.cmd(&[
        "ACL", "SETUSER", "alice", "on", ">p1", "+get", "+set", "~k*",
    ]);
    assert_eq!(setup.to_string(), "+OK");
    let steps: [(&[&str], &str); 7] = [
        (&["AUTH", "alice", "wrong"], "-WRONGPASS"),
        (&["AUTH", "nobody", "x"], "-WRONGPASS"),
        (&["AUTH", "alice", "p1"], "+OK"),
        (&["DEL", "k1"], "-NOPERM"),
        (&["INCR", "k1"], "-NOPERM"),
        (&["GET", "x"], "-NOPERM"),
        (&["SET", "k1", "v"], "+OK"),
    ];
    for (cmd, want) in steps {
        let got = alice.cmd(cmd).to_string();
        assert!(got.starts_with(want), "{cmd:?}: {got}");
    }
    assert_eq!(
        acl_stats(&admin.cmd(&["INFO", "stats"])),
        [
            "acl_access_denied_auth:2",
            "acl_access_denied_cmd:2",
            "acl_access_denied_key:1",
            "acl_access_denied_channel:0",
        ]
    );
}

/// memcached's text-protocol authentication (a `set` whose data is `<user>
/// <password>`) takes any enabled user whose password matches, as RESP's
/// AUTH does; a wrong password and a disabled user are refused.
#[test]
fn memcached_authenticates_two_users() {
    use std::io::Write as _;
    let server = Server::start(&["--requirepass", "secret"], None);
    let mut admin = Client::connect(server.resp);
    for cmd in [
        "AUTH secret",
        "ACL SETUSER alice on >pa +@all ~*",
        "ACL SETUSER bob on >pb +@all ~*",
        "ACL SETUSER carol off >pc +@all ~*",
    ] {
        let args: Vec<&str> = cmd.split(' ').collect();
        assert_eq!(admin.cmd(&args).to_string(), "+OK", "{cmd}");
    }
    let wait = std::time::Duration::from_secs(5);
    let exchange = |req: &str, want: &str| {
        let mut s = std::net::TcpStream::connect(server.memcached).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let got = support::read_until(&mut s, want.as_bytes(), wait);
        assert_eq!(String::from_utf8_lossy(&got), want, "{req:?}");
    };
    exchange("get k\r\n", "CLIENT_ERROR unauthenticated\r\n");
    let auth = |user_pass: &str| format!("set x 0 0 {}\r\n{user_pass}\r\n", user_pass.len());
    exchange(
        &(auth("alice pa") + "set k 0 0 1\r\nv\r\n"),
        "STORED\r\nSTORED\r\n",
    );
    exchange(
        &(auth("bob pb") + "get k\r\n"),
        "STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n",
    );
    exchange(&auth("bob pa"), "CLIENT_ERROR authentication failure\r\n");
    exchange(&auth("carol pc"), "CLIENT_ERROR authentication failure\r\n");
    exchange(
        &auth("nobody pa"),
        "CLIENT_ERROR authentication failure\r\n",
    );
    // Each refusal is an auth denial in the ACL LOG, by user name.
    let log = log(admin.cmd(&["ACL", "LOG"])).to_string();
    for user in ["bob", "carol", "nobody"] {
        assert!(log.contains(&format!("\"username\", \"{user}\"")), "{log}");
    }
}

/// After memcached authentication the user's permissions hold as they do
/// on RESP: a `set` needs `set` (and a write pattern), a `get` a read
/// pattern covering the key; a refusal is a CLIENT_ERROR and changes
/// nothing.
#[test]
fn memcached_commands_follow_the_users_permissions() {
    use std::io::Write as _;
    let server = Server::start(&["--requirepass", "secret"], None);
    let mut admin = Client::connect(server.resp);
    for cmd in ["AUTH secret", "SET k1 v", "ACL SETUSER bob on >pb +get ~b*"] {
        let args: Vec<&str> = cmd.split(' ').collect();
        assert_eq!(admin.cmd(&args).to_string(), "+OK", "{cmd}");
    }
    let mut s = std::net::TcpStream::connect(server.memcached).unwrap();
    let wait = std::time::Duration::from_secs(5);
    let mut ask = |req: &str, end: &str| {
        s.write_all(req.as_bytes()).unwrap();
        String::from_utf8_lossy(&support::read_until(&mut s, end.as_bytes(), wait)).into_owned()
    };
    assert_eq!(ask("set x 0 0 6\r\nbob pb\r\n", "\r\n"), "STORED\r\n");
    assert_eq!(ask("get b1\r\n", "\r\n"), "END\r\n");
    let set = ask("set b1 0 0 1\r\nv\r\n", "\r\n");
    assert!(
        set.starts_with("CLIENT_ERROR "),
        "set without +set: {set:?}"
    );
    let get = ask("get k1\r\n", "\r\n");
    assert!(get.starts_with("CLIENT_ERROR "), "get outside ~b*: {get:?}");
    let delete = ask("delete k1\r\n", "\r\n");
    assert!(
        delete.starts_with("CLIENT_ERROR "),
        "delete without +del: {delete:?}"
    );
    assert_eq!(admin.cmd(&["EXISTS", "b1", "k1"]).to_string(), ":1");
}

/// A binary request: (opcode, extras, key, value) in a 24-byte header.
fn binary(op: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let body = (extras.len() + key.len() + value.len()) as u32;
    let mut p = vec![0x80, op];
    p.extend_from_slice(&(key.len() as u16).to_be_bytes());
    p.extend_from_slice(&[extras.len() as u8, 0, 0, 0]);
    p.extend_from_slice(&body.to_be_bytes());
    p.extend_from_slice(&[0; 12]);
    p.extend_from_slice(extras);
    p.extend_from_slice(key);
    p.extend_from_slice(value);
    p
}

/// Sends one binary request and returns the status of its response.
fn binary_status(s: &mut std::net::TcpStream, req: &[u8]) -> u16 {
    use std::io::{Read as _, Write as _};
    s.write_all(req).unwrap();
    let mut head = [0u8; 24];
    s.read_exact(&mut head).unwrap();
    assert_eq!(head[0], 0x81, "a response header");
    let body = u32::from_be_bytes(head[8..12].try_into().unwrap());
    let mut rest = vec![0u8; body as usize];
    s.read_exact(&mut rest).unwrap();
    u16::from_be_bytes([head[6], head[7]])
}

/// Binary SASL PLAIN takes any enabled user, as the text protocol does;
/// a request the user may not make is refused with EACCESS (0x24) and
/// changes nothing.
#[test]
fn memcached_binary_sasl_two_users() {
    let server = Server::start(&["--requirepass", "secret"], None);
    let mut admin = Client::connect(server.resp);
    for cmd in [
        "AUTH secret",
        "ACL SETUSER alice on >pa +@all ~*",
        "ACL SETUSER bob on >pb +get ~*",
    ] {
        let args: Vec<&str> = cmd.split(' ').collect();
        assert_eq!(admin.cmd(&args).to_string(), "+OK", "{cmd}");
    }
    let connect = || {
        let s = std::net::TcpStream::connect(server.memcached).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        s
    };
    const SASL_AUTH: u8 = 0x21;
    const GET: u8 = 0x00;
    const SET: u8 = 0x01;
    let set_extras = [0u8; 8];
    let mut alice = connect();
    assert_eq!(
        binary_status(
            &mut alice,
            &binary(SASL_AUTH, &[], b"PLAIN", b"\0alice\0wrong")
        ),
        0x20
    );
    assert_eq!(
        binary_status(
            &mut alice,
            &binary(SASL_AUTH, &[], b"PLAIN", b"\0alice\0pa")
        ),
        0
    );
    assert_eq!(
        binary_status(&mut alice, &binary(SET, &set_extras, b"k", b"v")),
        0
    );
    let mut bob = connect();
    assert_eq!(
        binary_status(&mut bob, &binary(SASL_AUTH, &[], b"PLAIN", b"\0bob\0pb")),
        0
    );
    assert_eq!(binary_status(&mut bob, &binary(GET, &[], b"k", b"")), 0);
    assert_eq!(
        binary_status(&mut bob, &binary(SET, &set_extras, b"k2", b"v")),
        0x20,
        "bob has no +set: memcached's authentication error status"
    );
    assert_eq!(admin.cmd(&["EXISTS", "k", "k2"]).to_string(), ":1");
}

/// RANGE is allowed only where one read pattern covers every key the
/// range could hold: `~user:*` covers `[user:a [user:z` (every key between
/// two keys that start with `user:` starts with it too), never an open
/// end, and `~user:?` does not cover `[user:1 [user:2` (`user:10` lies
/// between). A refusal is the key NOPERM, never a filtered reply.
#[test]
fn range_needs_a_pattern_covering_the_whole_range() {
    let server = Server::start(&[], None);
    let mut admin = Client::connect(server.resp);
    for cmd in [
        "MSET user:b 1 user:c 2 zz 3",
        "ACL SETUSER alice on >pa +@all ~user:*",
        "ACL SETUSER bob on >pb +@all ~user:?",
        "ACL SETUSER carol on >pc +@all %W~user:*",
    ] {
        let args: Vec<&str> = cmd.split(' ').collect();
        assert_eq!(admin.cmd(&args).to_string(), "+OK", "{cmd}");
    }
    let key_noperm =
        "-NOPERM this user has no permissions to access one of the keys used as arguments";
    let cases: [(&str, &str, &str); 8] = [
        (
            "alice pa",
            "RANGE [user:a [user:z",
            r#"["user:b", "1", "user:c", "2"]"#,
        ),
        (
            "alice pa",
            "RANGE (user:b [user:c KEYSONLY",
            r#"["user:c"]"#,
        ),
        ("alice pa", "RANGE - +", key_noperm),
        ("alice pa", "RANGE [user:a +", key_noperm),
        ("alice pa", "RANGE [a [user:z", key_noperm),
        ("bob pb", "RANGE [user:1 [user:2", key_noperm),
        ("carol pc", "RANGE [user:a [user:z", key_noperm),
        (
            "default x",
            "RANGE - + KEYSONLY",
            r#"["user:b", "user:c", "zz"]"#,
        ),
    ];
    for (user_pass, cmd, want) in cases {
        let mut c = Client::connect(server.resp);
        let (user, pass) = user_pass.split_once(' ').unwrap();
        if user != "default" {
            assert_eq!(c.cmd(&["AUTH", user, pass]).to_string(), "+OK");
        }
        let args: Vec<&str> = cmd.split(' ').collect();
        assert_eq!(c.cmd(&args).to_string(), want, "{user}: {cmd}");
    }
}

/// A category none of combkv's commands are in (hash, list, set ...)
/// allows nothing here, so a user given only it reads back as `-@all`,
/// where Redis, which has such commands, writes `-@all +@hash`.
#[test]
fn a_category_without_commands_allows_nothing() {
    let server = Server::start(&[], None);
    let mut admin = Client::connect(server.resp);
    assert_eq!(
        admin.cmd(&["ACL", "SETUSER", "u", "+@hash"]).to_string(),
        "+OK"
    );
    assert_eq!(
        admin.cmd(&["ACL", "LIST"]).to_string(),
        r#"["user default on nopass ~* &* +@all", "user u off resetchannels -@all"]"#
    );
}
