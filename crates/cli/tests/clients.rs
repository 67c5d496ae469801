//! CLIENT LIST, INFO, KILL and PAUSE as Redis 7.0 has them: each scenario
//! runs against a redis-server and against `combkv serve`, and writes a
//! transcript of what it saw; the two transcripts must be equal.
//!
//! Only values that must differ are normalised (`NORMALISED`): ids,
//! addresses, file descriptors, times, and the sizes of buffers each
//! server allocates its own way. What the scenarios expect of those (idle
//! counts from the last command, laddr is the listener's address, a
//! killed client's next command fails) they check on each server.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use support::Server;
use support::resp::{Client, Redis, Value, redis_installed};

/// CLIENT LIST fields whose values differ between any two servers.
const NORMALISED: &[&str] = &[
    "id",
    "addr",
    "laddr",
    "fd",
    "age",
    "idle",
    "qbuf-free",
    "rbs",
    "rbp",
    "tot-mem",
];

/// Redis 7.0's CLIENT LIST fields, in its order.
const FIELDS: &[&str] = &[
    "id",
    "addr",
    "laddr",
    "fd",
    "name",
    "age",
    "idle",
    "flags",
    "db",
    "sub",
    "psub",
    "ssub",
    "multi",
    "qbuf",
    "qbuf-free",
    "argv-mem",
    "multi-mem",
    "rbs",
    "rbp",
    "obl",
    "oll",
    "omem",
    "tot-mem",
    "events",
    "cmd",
    "user",
    "redir",
    "resp",
];

/// A client line's fields, in order.
fn fields(line: &str) -> Vec<(String, String)> {
    line.split(' ')
        .map(|f| {
            let (k, v) = f.split_once('=').unwrap_or((f, ""));
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn field(line: &str, name: &str) -> String {
    fields(line)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no {name} in {line}"))
}

/// The lines of a CLIENT LIST or INFO reply, each checked for Redis's
/// field names in order and normalised.
fn lines(v: &Value) -> Vec<String> {
    let Some(text) = v.text() else {
        return vec![format!("{v:?}")];
    };
    text.lines()
        .map(|l| {
            let f = fields(l);
            let names: Vec<&str> = f.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(names, FIELDS, "{l}");
            f.iter()
                .map(|(k, v)| {
                    if NORMALISED.contains(&k.as_str()) {
                        format!("{k}=*")
                    } else {
                        format!("{k}={v}")
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

fn id(c: &mut Client) -> String {
    match c.cmd(&["CLIENT", "ID"]) {
        Value::Int(n) => n.to_string(),
        other => panic!("CLIENT ID: {other:?}"),
    }
}

/// A client the server has accepted: it answered a PING (combkv's
/// acceptor hands a connection to its event loop, which lists it, a moment
/// after the kernel completes it).
fn connected(server: SocketAddr) -> Client {
    let mut c = Client::connect(server);
    assert_eq!(c.cmd(&["PING"]), Value::Simple("PONG".into()));
    c
}

/// What a reply was, for a transcript.
fn show(v: &Value) -> String {
    format!("{v:?}")
}

fn compare(name: &str, scenario: fn(SocketAddr) -> Vec<String>) {
    if !redis_installed() {
        return;
    }
    let redis = Redis::start(None, &[]);
    let want = scenario(redis.addr);
    let combkv = Server::start(&[], None);
    let got = scenario(combkv.resp);
    let mut differ = Vec::new();
    for i in 0..want.len().max(got.len()) {
        let (w, g) = (want.get(i), got.get(i));
        if w != g {
            differ.push(format!("step {i}:\n  redis:  {w:?}\n  combkv: {g:?}"));
        }
    }
    assert!(
        differ.is_empty(),
        "{name}: {} steps differ\n{}",
        differ.len(),
        differ.join("\n")
    );
}

/// CLIENT LIST and INFO: fields, order, values (a transaction's `x` and
/// `multi=`, a named client, `cmd=` with the subcommand), TYPE and ID
/// filters and their errors; `idle` counts from the last command and
/// `laddr` is the listener's address on both servers.
fn list_scenario(server: SocketAddr) -> Vec<String> {
    let mut out = Vec::new();
    let mut a = Client::connect(server);
    let mut b = Client::connect(server);
    let b_id = id(&mut b);
    out.push(show(&a.cmd(&["CLIENT", "SETNAME", "alpha"])));
    out.push(show(&b.cmd(&["SET", "k", "v"])));
    out.push(show(&b.cmd(&["MULTI"])));
    out.push(show(&b.cmd(&["SET", "k", "w"])));
    out.push(show(&b.cmd(&["GET", "k"])));
    let list = a.cmd(&["CLIENT", "LIST"]);
    out.extend(lines(&list));
    out.extend(lines(&a.cmd(&["CLIENT", "INFO"])));
    out.extend(lines(&a.cmd(&["CLIENT", "LIST", "TYPE", "normal"])));
    for t in ["pubsub", "master", "replica", "slave", "foo"] {
        out.push(show(&a.cmd(&["CLIENT", "LIST", "TYPE", t])));
    }
    out.extend(lines(
        &a.cmd(&["CLIENT", "LIST", "ID", &b_id, "999999", &b_id]),
    ));
    for bad in [
        &["CLIENT", "LIST", "ID", "x"][..],
        &["CLIENT", "LIST", "foo"],
        &["CLIENT", "LIST", "TYPE", "normal", "x"],
        &["CLIENT", "LIST", "ID"],
        &["CLIENT", "INFO", "x"],
    ] {
        out.push(show(&a.cmd(bad)));
    }
    out.push(show(&b.cmd(&["DISCARD"])));
    // The listener's address, and an idle count from the last command.
    let text = list.text().unwrap();
    let first = text.lines().next().unwrap();
    out.push(format!(
        "laddr {}",
        field(first, "laddr") == server.to_string()
    ));
    std::thread::sleep(Duration::from_millis(2100));
    let info = a.cmd(&["CLIENT", "LIST", "ID", &b_id]).text().unwrap();
    let idle: u64 = field(&info, "idle").parse().unwrap();
    out.push(format!("b idle >= 2: {}", idle >= 2));
    let mine = a.cmd(&["CLIENT", "INFO"]).text().unwrap();
    out.push(format!("a idle: {}", field(&mine, "idle")));
    out
}

#[test]
fn client_list_and_info_match_redis() {
    compare("CLIENT LIST", list_scenario);
}

/// CLIENT KILL, old and new forms: replies, errors, and that a killed
/// client's next command finds its connection closed while the others go
/// on.
fn kill_scenario(server: SocketAddr) -> Vec<String> {
    let mut out = Vec::new();
    let mut a = connected(server);
    let mut b = connected(server);
    let mut c = connected(server);
    let b_addr = b.local_addr().to_string();
    out.push(show(&a.cmd(&["CLIENT", "KILL", &b_addr])));
    out.push(show(&b.cmd(&["PING"])));
    out.push(show(&c.cmd(&["PING"])));
    out.push(show(&a.cmd(&["CLIENT", "KILL", &b_addr])));
    let mut d = connected(server);
    let d_id = id(&mut d);
    out.push(show(&a.cmd(&["CLIENT", "KILL", "ID", &d_id])));
    out.push(show(&d.cmd(&["PING"])));
    out.push(show(&a.cmd(&["CLIENT", "KILL", "ID", &d_id])));
    for bad in [
        &["CLIENT", "KILL"][..],
        &["CLIENT", "KILL", "ID", "0"],
        &["CLIENT", "KILL", "ID", "x"],
        &["CLIENT", "KILL", "ID"],
        &["CLIENT", "KILL", "ID", "1", "TYPE"],
        &["CLIENT", "KILL", "USER", "nobody"],
        &["CLIENT", "KILL", "SKIPME", "maybe"],
        &["CLIENT", "KILL", "TYPE", "foo"],
        &["CLIENT", "KILL", "FOO", "bar"],
    ] {
        out.push(show(&a.cmd(bad)));
    }
    // Filters that match nobody.
    out.push(show(&a.cmd(&["CLIENT", "KILL", "ADDR", "1.2.3.4:5"])));
    out.push(show(&a.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"])));
    out.push(show(&a.cmd(&["CLIENT", "KILL", "LADDR", "1.2.3.4:5"])));
    // SKIPME yes (the default): every other normal client.
    out.push(show(&a.cmd(&["CLIENT", "KILL", "TYPE", "normal"])));
    out.push(show(&c.cmd(&["PING"])));
    out.push(show(&a.cmd(&["PING"])));
    let mut e = connected(server);
    out.push(show(&e.cmd(&["PING"])));
    out.push(show(
        &a.cmd(&["CLIENT", "KILL", "USER", "default", "SKIPME", "yes"]),
    ));
    out.push(show(&e.cmd(&["PING"])));
    // SKIPME no: the caller too, after its reply.
    let mut f = connected(server);
    out.push(show(&f.cmd(&["PING"])));
    let laddr = server.to_string();
    out.push(show(
        &a.cmd(&["CLIENT", "KILL", "LADDR", &laddr, "SKIPME", "no"]),
    ));
    out.push(show(&a.cmd(&["PING"])));
    out.push(show(&f.cmd(&["PING"])));
    // The old form kills the caller too.
    let mut g = connected(server);
    let g_addr = g.local_addr().to_string();
    out.push(show(&g.cmd(&["CLIENT", "KILL", &g_addr])));
    out.push(show(&g.cmd(&["PING"])));
    out
}

#[test]
fn client_kill_matches_redis() {
    compare("CLIENT KILL", kill_scenario);
}

/// CLIENT PAUSE WRITE holds writes (not refused: they run after the
/// pause) while reads and transactions' queuing go on; EXEC of queued
/// writes waits; ALL holds every command until the timeout; the held
/// client shows `b`. Then the argument errors of PAUSE, UNPAUSE and
/// NO-EVICT.
fn pause_scenario(server: SocketAddr) -> Vec<String> {
    let quick = Duration::from_millis(300);
    let mut out = Vec::new();
    let mut a = Client::connect(server);
    let mut w = Client::connect(server);
    let mut r = Client::connect(server);
    let mut m = Client::connect(server);
    let w_id = id(&mut w);
    out.push(show(&m.cmd(&["MULTI"])));
    out.push(show(&a.cmd(&["CLIENT", "PAUSE", "100000", "WRITE"])));
    // A shorter pause does not end the one in force.
    out.push(show(&a.cmd(&["CLIENT", "PAUSE", "10", "WRITE"])));
    std::thread::sleep(Duration::from_millis(50));
    out.push(show(&r.cmd(&["GET", "k"])));
    w.send(&["SET", "k", "v"]);
    out.push(show(&w.reply(quick)));
    out.push(show(&r.cmd(&["GET", "k"])));
    out.push(show(&m.cmd(&["SET", "k2", "v"])));
    m.send(&["EXEC"]);
    out.push(show(&m.reply(quick)));
    let held = a.cmd(&["CLIENT", "LIST", "ID", &w_id]).text().unwrap();
    out.push(format!("held flags={}", field(&held, "flags")));
    let info = a.cmd(&["INFO", "clients"]).text().unwrap();
    let blocked = info.lines().find(|l| l.starts_with("blocked_clients:"));
    out.push(format!("{blocked:?}"));
    out.push(show(&a.cmd(&["CLIENT", "UNPAUSE"])));
    out.push(show(&w.reply(Duration::from_secs(2))));
    out.push(show(&m.reply(Duration::from_secs(2))));
    out.push(show(&r.cmd(&["GET", "k"])));
    // ALL, for a short while: even a PING waits for the end.
    out.push(show(&a.cmd(&["CLIENT", "PAUSE", "700", "ALL"])));
    r.send(&["PING"]);
    out.push(show(&r.reply(quick)));
    out.push(show(&a.cmd(&["GET"])));
    out.push(show(&r.reply(Duration::from_secs(3))));
    out.push(show(&a.cmd(&["CLIENT", "PAUSE", "0"])));
    out.push(show(&r.cmd(&["PING"])));
    for bad in [
        &["CLIENT", "PAUSE"][..],
        &["CLIENT", "PAUSE", "10", "foo"],
        &["CLIENT", "PAUSE", "x"],
        &["CLIENT", "PAUSE", "-1"],
        &["CLIENT", "PAUSE", "x", "foo"],
        &["CLIENT", "PAUSE", "1", "2", "3"],
        &["CLIENT", "UNPAUSE", "x"],
        &["CLIENT", "NO-EVICT", "maybe"],
        &["CLIENT", "NO-EVICT"],
        &["CLIENT", "NO-EVICT", "on"],
    ] {
        out.push(show(&a.cmd(bad)));
    }
    let mine = a.cmd(&["CLIENT", "INFO"]).text().unwrap();
    out.push(format!("flags={}", field(&mine, "flags")));
    out.push(show(&a.cmd(&["CLIENT", "NO-EVICT", "off"])));
    out
}

#[test]
fn client_pause_matches_redis() {
    compare("CLIENT PAUSE", pause_scenario);
}

/// What Redis 7.0 lacks: CLIENT NO-TOUCH (7.2) and KILL MAXAGE (7.4).
#[test]
fn no_touch_and_maxage() {
    let server = Server::start(&[], None);
    let mut a = Client::connect(server.resp);
    let mut old = Client::connect(server.resp);
    assert_eq!(old.cmd(&["PING"]), Value::Simple("PONG".into()));
    assert_eq!(
        a.cmd(&["CLIENT", "NO-TOUCH", "on"]),
        Value::Simple("OK".into())
    );
    let info = a.cmd(&["CLIENT", "INFO"]).text().unwrap();
    assert_eq!(field(&info, "flags"), "T");
    assert_eq!(
        a.cmd(&["CLIENT", "NO-TOUCH", "x"]),
        Value::Error("ERR syntax error".into())
    );
    assert_eq!(
        a.cmd(&["CLIENT", "KILL", "MAXAGE", "x"]),
        Value::Error("ERR maxage is not an integer or out of range".into())
    );
    std::thread::sleep(Duration::from_millis(2100));
    let mut young = Client::connect(server.resp);
    assert_eq!(young.cmd(&["PING"]), Value::Simple("PONG".into()));
    // `old` is over 1 s old, `young` not; the caller is skipped.
    assert_eq!(a.cmd(&["CLIENT", "KILL", "MAXAGE", "1"]), Value::Int(1));
    assert_eq!(old.cmd(&["PING"]), Value::Closed);
    assert_eq!(young.cmd(&["PING"]), Value::Simple("PONG".into()));
}

/// Memcached connections are clients too: CLIENT PAUSE WRITE holds their
/// writes (reads go on) until UNPAUSE, and CLIENT KILL closes them.
#[test]
fn pause_and_kill_reach_memcached_clients() {
    use std::io::{Read, Write};
    let server = Server::start(&[], None);
    let mut a = Client::connect(server.resp);
    let mut mc = std::net::TcpStream::connect(server.memcached).unwrap();
    let wait = Duration::from_secs(5);
    mc.write_all(b"version\r\n").unwrap();
    support::read_until(&mut mc, b"\r\n", wait);
    assert_eq!(
        a.cmd(&["CLIENT", "PAUSE", "100000", "WRITE"]),
        Value::Simple("OK".into())
    );
    mc.write_all(b"get k\r\n").unwrap();
    support::read_until(&mut mc, b"END\r\n", wait);
    mc.write_all(b"set k 0 0 1\r\nv\r\n").unwrap();
    mc.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(
        mc.read(&mut buf).is_err(),
        "a write answered during the pause"
    );
    let info = a.cmd(&["INFO", "clients"]).text().unwrap();
    assert!(info.contains("blocked_clients:1\r\n"), "{info}");
    assert_eq!(a.cmd(&["CLIENT", "UNPAUSE"]), Value::Simple("OK".into()));
    support::read_until(&mut mc, b"STORED\r\n", wait);
    let laddr = server.memcached.to_string();
    assert_eq!(a.cmd(&["CLIENT", "KILL", "LADDR", &laddr]), Value::Int(1));
    mc.set_read_timeout(Some(wait)).unwrap();
    let _ = mc.write_all(b"get k\r\n");
    assert!(
        matches!(mc.read(&mut buf), Ok(0) | Err(_)),
        "a killed memcached client was served"
    );
}
