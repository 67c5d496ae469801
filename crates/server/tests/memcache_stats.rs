//! memcached's operator commands against a real memcached 1.6 (Debian's,
//! installed by `scripts/peers install memcached memcdump`, which
//! `scripts/test` runs first): `stats settings|items|slabs|conns|sizes`
//! print only names memcached prints, and every name memcached_exporter
//! reads; `lru_crawler metadump` and `stats cachedump` answer as memcached
//! does, and `memcdump` lists every key. A missing peer fails the test
//! unless `COMBKV_SKIP_PEERS` is set.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use combkv_server::{ByteSize, Listen, Server, ServerConfig};

/// True when the peers are there; false (skipped) with `COMBKV_SKIP_PEERS`.
fn peers(names: &[&str]) -> bool {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/peers");
    let out = Command::new(script)
        .arg("check")
        .args(names)
        .output()
        .expect("running scripts/peers");
    if out.status.success() {
        return true;
    }
    let why = String::from_utf8_lossy(&out.stderr);
    if std::env::var_os("COMBKV_SKIP_PEERS").is_some() {
        eprintln!("SKIPPED (COMBKV_SKIP_PEERS is set): {why}");
        return false;
    }
    panic!("{why}; `scripts/test` installs them first, or set COMBKV_SKIP_PEERS=1 to skip");
}

fn start(max_reply: Option<u64>) -> Server {
    let mut c = ServerConfig {
        resp: Listen::At("127.0.0.1:0".parse().unwrap()),
        memcached: Listen::At("127.0.0.1:0".parse().unwrap()),
        threads: 2,
        ..Default::default()
    };
    if let Some(b) = max_reply {
        c.max_reply_bytes = ByteSize(b);
    }
    Server::start(c).expect("server starts")
}

/// A real memcached on a free loopback port, stopped when dropped.
struct Memcached(Child, SocketAddr);

impl Memcached {
    fn start() -> Memcached {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cmd = Command::new("memcached");
        cmd.args(["-l", "127.0.0.1", "-U", "0", "-p", &port.to_string()]);
        // memcached refuses to run as root without a user to switch to.
        let uid = Command::new("id").arg("-u").output().expect("id -u");
        if String::from_utf8_lossy(&uid.stdout).trim() == "0" {
            cmd.args(["-u", "nobody"]);
        }
        let child = cmd.spawn().expect("starting memcached");
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "memcached did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Memcached(child, addr)
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Sends `req` and reads until the reply ends with one of `ends`.
fn ask(s: &mut TcpStream, req: &[u8], ends: &[&[u8]]) -> Vec<u8> {
    s.write_all(req).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while !ends.iter().any(|e| got.ends_with(e)) {
        let n = s.read(&mut buf).expect("reply");
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// A reply of one line (an error, BADCLASS) or of lines and `END`.
const REPLY_ENDS: &[&[u8]] = &[
    b"END\r\n",
    b"ERROR\r\n",
    b"BADCLASS invalid class id\r\n",
    b"Illegal slab id\r\n",
    b"bad command line\r\n",
    b"bad command line format\r\n",
];

/// Stores the same items on both servers.
fn fill(s: &mut TcpStream) {
    for (key, exptime) in [("foo", 0), ("a%b", 1000), ("\u{43a}\u{43b}", 0)] {
        let req = format!("set {key} 5 {exptime} 3\r\nbar\r\n");
        assert_eq!(ask(s, req.as_bytes(), &[b"\r\n"]), b"STORED\r\n");
    }
    assert_eq!(
        ask(s, b"get foo\r\n", &[b"END\r\n"]),
        b"VALUE foo 5 3\r\nbar\r\nEND\r\n"
    );
}

/// The STAT names of a reply, numbers (slab classes, connection ids)
/// replaced by `N`.
fn names(reply: &[u8]) -> BTreeSet<String> {
    let text = String::from_utf8(reply.to_vec()).unwrap();
    assert!(text.ends_with("END\r\n"), "{text}");
    text.lines()
        .filter(|l| *l != "END")
        .map(|l| {
            let mut w = l.split(' ');
            assert_eq!(w.next(), Some("STAT"), "{l}");
            let name = w.next().unwrap();
            name.split(':')
                .map(|p| if p.parse::<u64>().is_ok() { "N" } else { p })
                .collect::<Vec<_>>()
                .join(":")
        })
        .collect()
}

/// What memcached_exporter (github.com/prometheus/memcached_exporter at
/// 17e002c, pkg/exporter/exporter.go) reads, by subcommand; a name it
/// reads and finds missing drops the rest of its figures or reports the
/// server down (`cmd_set`, `cas_hits`, `cas_badval`).
const EXPORTER_READS: &[(&str, &[&str])] = &[
    (
        "stats",
        &[
            "version",
            "get_hits",
            "get_misses",
            "delete_hits",
            "delete_misses",
            "incr_hits",
            "incr_misses",
            "decr_hits",
            "decr_misses",
            "cas_hits",
            "cas_misses",
            "touch_hits",
            "touch_misses",
            "uptime",
            "time",
            "cas_badval",
            "cmd_flush",
            "cmd_set",
            "rusage_user",
            "rusage_system",
            "bytes",
            "limit_maxbytes",
            "curr_items",
            "total_items",
            "bytes_read",
            "bytes_written",
            "curr_connections",
            "total_connections",
            "rejected_connections",
            "evictions",
            "store_too_large",
            "store_no_memory",
        ],
    ),
    ("stats settings", &["maxconns"]),
    ("stats items", &["items:N:number", "items:N:age"]),
    (
        "stats slabs",
        &[
            "N:cmd_set",
            "N:cas_hits",
            "N:cas_badval",
            "N:get_hits",
            "total_malloced",
        ],
    ),
];

#[test]
fn stats_subcommands_print_memcacheds_names() {
    if !peers(&["memcached"]) {
        return;
    }
    let real = Memcached::start();
    let server = start(None);
    let mut m = connect(real.1);
    let mut c = connect(server.memcached_addr().unwrap());
    let _idle = connect(server.memcached_addr().unwrap());
    fill(&mut m);
    fill(&mut c);
    for sub in ["settings", "items", "slabs", "conns", "sizes", ""] {
        let req = format!("stats {sub}\r\n");
        let theirs = names(&ask(&mut m, req.as_bytes(), &[b"END\r\n"]));
        let ours = names(&ask(&mut c, req.as_bytes(), &[b"END\r\n"]));
        assert!(!ours.is_empty(), "stats {sub}: nothing");
        let extra: Vec<_> = ours.difference(&theirs).collect();
        // `cmd_meta` is combkv's own count of meta commands (memcached
        // counts them per command, in names combkv does not print).
        let extra: Vec<_> = extra.into_iter().filter(|n| *n != "cmd_meta").collect();
        assert!(extra.is_empty(), "stats {sub}: not memcached's: {extra:?}");
    }
    for (req, want) in EXPORTER_READS {
        let reply = ask(&mut c, format!("{req}\r\n").as_bytes(), &[b"END\r\n"]);
        let ours = names(&reply);
        for name in *want {
            assert!(ours.contains(*name), "{req}: {name} missing");
        }
        // The exporter parses each as a float (rusage as `<s>.<us>`); one
        // that does not parse reports the server down.
        let text = String::from_utf8(reply).unwrap();
        for line in text.lines().filter(|l| *l != "END") {
            let mut w = line.split(' ').skip(1);
            let (name, value) = (w.next().unwrap(), w.next().unwrap());
            let read = want.iter().any(|n| {
                *n == name
                    || n.strip_prefix("N:")
                        .is_some_and(|n| name.ends_with(&format!(":{n}")))
            });
            if read && name != "version" {
                assert!(value.parse::<f64>().is_ok(), "{req}: {line}");
            }
            if name.starts_with("rusage_") {
                let (s, us) = value.split_once('.').expect(line);
                assert!(s.parse::<u64>().is_ok() && us.len() == 6, "{line}");
            }
        }
    }
    server.shutdown();
}

/// The value of a STAT line.
fn stat<'a>(reply: &'a str, name: &str) -> &'a str {
    reply
        .lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .unwrap_or_else(|| panic!("no {name} in {reply}"))
}

#[test]
fn stats_report_true_values() {
    let server = start(None);
    let addr = server.memcached_addr().unwrap();
    let mut c = connect(addr);
    let idle = connect(addr);
    let empty = ask(&mut c, b"stats items\r\n", &[b"END\r\n"]);
    assert_eq!(empty, b"END\r\n", "an empty store lists no class");
    fill(&mut c);
    let settings = String::from_utf8(ask(&mut c, b"stats settings\r\n", &[b"END\r\n"])).unwrap();
    assert_eq!(stat(&settings, "tcpport"), addr.port().to_string());
    assert_eq!(stat(&settings, "udpport"), "0");
    assert_eq!(stat(&settings, "maxconns"), "10000");
    assert_eq!(stat(&settings, "evictions"), "off");
    let items = String::from_utf8(ask(&mut c, b"stats items\r\n", &[b"END\r\n"])).unwrap();
    assert_eq!(stat(&items, "items:1:number"), "3");
    let slabs = String::from_utf8(ask(&mut c, b"stats slabs\r\n", &[b"END\r\n"])).unwrap();
    assert_eq!(stat(&slabs, "1:cmd_set"), "3");
    assert_eq!(stat(&slabs, "1:get_hits"), "1");
    assert_eq!(stat(&slabs, "active_slabs"), "1");
    // A connection is listed once its event loop took it from the
    // acceptor, which may be a moment after the connect returned.
    let idle_addr = format!("tcp:{}", idle.local_addr().unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    let conns = loop {
        let conns = String::from_utf8(ask(&mut c, b"stats conns\r\n", &[b"END\r\n"])).unwrap();
        if conns.contains(&idle_addr) || Instant::now() > deadline {
            break conns;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    for s in [&c, &idle] {
        let me = format!("tcp:{}", s.local_addr().unwrap());
        let line = conns
            .lines()
            .find(|l| l.ends_with(&format!(":addr {me}")))
            .unwrap_or_else(|| panic!("{me} not in {conns}"));
        let id = line
            .strip_prefix("STAT ")
            .unwrap()
            .split(':')
            .next()
            .unwrap();
        assert_eq!(
            stat(&conns, &format!("{id}:listen_addr")),
            format!("tcp:{addr}")
        );
        let state = if std::ptr::eq(s, &c) {
            "conn_parse_cmd"
        } else {
            "conn_waiting"
        };
        assert_eq!(stat(&conns, &format!("{id}:state")), state);
        let idle_s: u64 = stat(&conns, &format!("{id}:secs_since_last_cmd"))
            .parse()
            .unwrap();
        assert!(idle_s < 60, "{conns}");
    }
    server.shutdown();
}

#[test]
fn dump_commands_answer_as_memcached() {
    if !peers(&["memcached"]) {
        return;
    }
    let real = Memcached::start();
    let server = start(None);
    let mut m = connect(real.1);
    let mut c = connect(server.memcached_addr().unwrap());
    for req in [
        "lru_crawler metadump 300",
        "lru_crawler metadump 0",
        "lru_crawler metadump foo",
        "lru_crawler metadump 1,x",
        "lru_crawler metadump 7",
        "lru_crawler metadump",
        "lru_crawler metadump all extra",
        "lru_crawler bogus",
        "stats cachedump 64 0",
        "stats cachedump 3 0",
        "stats cachedump 1",
        "stats cachedump x 0",
        "stats cachedump 1 -1",
    ] {
        let req = format!("{req}\r\n");
        let theirs = ask(&mut m, req.as_bytes(), REPLY_ENDS);
        let ours = ask(&mut c, req.as_bytes(), REPLY_ENDS);
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs),
            "{req}"
        );
    }
    fill(&mut m);
    fill(&mut c);
    // Each line's key, expiry (a time, or -1) and class: combkv keeps no
    // access time or fetched bit, its cas and size are its own, and the
    // two servers' clocks read a time a second apart at most.
    let lines = |reply: Vec<u8>| -> BTreeSet<String> {
        let text = String::from_utf8(reply).unwrap();
        let body = text.strip_suffix("END\r\n").expect("END");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let field = |f: &str| match f.strip_prefix("exp=") {
            Some("-1") => Some(f.to_string()),
            Some(t) => {
                let t: u64 = t.parse().unwrap();
                assert!(t.abs_diff(now + 1000) <= 3, "{f}");
                Some("exp=T".to_string())
            }
            None if f.starts_with("key=") || f.starts_with("cls=") => Some(f.to_string()),
            None => None,
        };
        body.split_terminator('\n')
            .map(|l| l.split(' ').filter_map(field).collect::<Vec<_>>().join(" "))
            .collect()
    };
    for req in ["lru_crawler metadump all", "lru_crawler metadump 1,2"] {
        let req = format!("{req}\r\n");
        let theirs = lines(ask(&mut m, req.as_bytes(), &[b"END\r\n"]));
        let ours = lines(ask(&mut c, req.as_bytes(), &[b"END\r\n"]));
        assert_eq!(ours, theirs, "{req}");
        assert!(ours.contains("key=%D0%BA%D0%BB exp=-1 cls=1"), "{ours:?}");
    }
    server.shutdown();
}

/// Sets `n` keys through a pipeline of noreply sets.
fn fill_many(s: &mut TcpStream, n: usize) -> BTreeSet<String> {
    let mut req = Vec::new();
    let mut keys = BTreeSet::new();
    for i in 0..n {
        let key = format!("key:{i:05}");
        req.extend_from_slice(format!("set {key} 0 0 10 noreply\r\n0123456789\r\n").as_bytes());
        keys.insert(key);
    }
    s.write_all(&req).unwrap();
    assert_eq!(ask(s, b"mn\r\n", &[b"MN\r\n"]), b"MN\r\n");
    keys
}

#[test]
fn metadump_streams_every_key_past_the_reply_budget() {
    // A reply budget far below the dump's size: the dump goes out in
    // parts, each after the client read the last.
    let server = start(Some(16 << 10));
    let mut c = connect(server.memcached_addr().unwrap());
    let keys = fill_many(&mut c, 3000);
    // A key written over RESP that memcached could not carry.
    let mut r = connect(server.resp_addr().unwrap());
    let set = b"*3\r\n$3\r\nSET\r\n$4\r\na b\n\r\n$1\r\nv\r\n";
    assert_eq!(ask(&mut r, set, &[b"\r\n"]), b"+OK\r\n");
    // Pipelined after the dump: answered after its END.
    let reply = ask(
        &mut c,
        b"lru_crawler metadump all\r\nmn\r\n",
        &[b"END\r\nMN\r\n"],
    );
    let text = String::from_utf8(reply).unwrap();
    let listed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("key="))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(listed.len(), 3001, "each key once");
    assert!(listed.contains(&"a%20b%0A"));
    let dumped: BTreeSet<String> = listed.iter().map(|k| k.replace("%3A", ":")).collect();
    assert!(dumped.is_superset(&keys));
    // cachedump with a limit, then without: the RESP key is left out.
    let two = ask(&mut c, b"stats cachedump 1 2\r\n", &[b"END\r\n"]);
    assert_eq!(
        String::from_utf8(two).unwrap(),
        "ITEM key:00000 [10 b; 0 s]\r\nITEM key:00001 [10 b; 0 s]\r\nEND\r\n"
    );
    let all = String::from_utf8(ask(&mut c, b"stats cachedump 1 0\r\n", &[b"END\r\n"])).unwrap();
    assert_eq!(all.lines().count(), 3001, "3000 ITEM lines and END");
    server.shutdown();
}

#[test]
fn memcdump_lists_every_key() {
    if !peers(&["memcdump"]) {
        return;
    }
    let server = start(Some(16 << 10));
    let addr = server.memcached_addr().unwrap();
    let mut c = connect(addr);
    let keys = fill_many(&mut c, 2000);
    let out = Command::new("memcdump")
        .arg(format!("--servers={addr}"))
        .output()
        .expect("running memcdump");
    assert!(out.status.success(), "{out:?}");
    let listed: BTreeSet<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(listed, keys);
    server.shutdown();
}

/// MONITOR on a RESP connection shows memcached requests too, text and
/// binary, as the text command they are: word, key, numbers and data.
#[test]
fn monitor_shows_memcached_requests() {
    let server = start(None);
    let mut m = connect(server.resp_addr().unwrap());
    assert_eq!(ask(&mut m, b"MONITOR\r\n", &[b"\r\n"]), b"+OK\r\n");
    let mut c = connect(server.memcached_addr().unwrap());
    assert_eq!(
        ask(&mut c, b"set k 7 0 2\r\nhi\r\n", &[b"\r\n"]),
        b"STORED\r\n"
    );
    ask(&mut c, b"get k nope\r\n", &[b"END\r\n"]);
    ask(&mut c, b"mg k v t\r\n", &[b"\r\n"]);
    ask(&mut c, b"delete nope\r\n", &[b"\r\n"]);
    let mut lines = Vec::new();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while lines.len() < 4 {
        let n = m.read(&mut buf).expect("monitor line");
        assert!(n > 0, "monitor closed");
        got.extend_from_slice(&buf[..n]);
        while let Some(end) = got.windows(2).position(|w| w == b"\r\n") {
            lines.push(String::from_utf8_lossy(&got[..end]).into_owned());
            got.drain(..end + 2);
        }
    }
    let want = [
        r#" "set" "k" "7" "0" "2" "hi""#,
        r#" "get" "k" "nope""#,
        r#" "mg" "k" "v" "t""#,
        r#" "delete" "nope""#,
    ];
    for (line, want) in lines.iter().zip(want) {
        assert!(
            line.starts_with('+') && line.contains(" [0 127.0.0.1:"),
            "{line}"
        );
        assert!(line.ends_with(want), "{line} should end with {want}");
    }
}
