//! memcached's binary protocol as raw packets against a server started
//! here: what `memccapable` (tests/memccapable.rs) does not reach: CAS on
//! every write, arithmetic's initial value and its "do not create", touch
//! and the gat family, quiet gets as a multi-get, SASL PLAIN, `stat`
//! groups, and errors that keep or lose framing. Also the `memcache`
//! crate, which speaks binary by default.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use combkv_server::{ByteSize, Listen, Server, ServerConfig};

const GET: u8 = 0x00;
const SET: u8 = 0x01;
const ADD: u8 = 0x02;
const REPLACE: u8 = 0x03;
const DELETE: u8 = 0x04;
const INCREMENT: u8 = 0x05;
const DECREMENT: u8 = 0x06;
const FLUSH: u8 = 0x08;
const GETQ: u8 = 0x09;
const NOOP: u8 = 0x0a;
const VERSION: u8 = 0x0b;
const GETK: u8 = 0x0c;
const GETKQ: u8 = 0x0d;
const APPEND: u8 = 0x0e;
const STAT: u8 = 0x10;
const SETQ: u8 = 0x11;
const INCREMENTQ: u8 = 0x15;
const VERBOSITY: u8 = 0x1b;
const TOUCH: u8 = 0x1c;
const GAT: u8 = 0x1d;
const GATQ: u8 = 0x1e;
const SASL_LIST: u8 = 0x20;
const SASL_AUTH: u8 = 0x21;
const GATK: u8 = 0x23;

const OK: u16 = 0x00;
const NOT_FOUND: u16 = 0x01;
const EXISTS: u16 = 0x02;
const TOO_LARGE: u16 = 0x03;
const INVALID: u16 = 0x04;
const NOT_STORED: u16 = 0x05;
const NON_NUMERIC: u16 = 0x06;
const AUTH_ERROR: u16 = 0x20;
const UNKNOWN: u16 = 0x81;

fn start(config: ServerConfig) -> Server {
    Server::start(ServerConfig {
        resp: Listen::Off,
        memcached: Listen::At("127.0.0.1:0".parse().unwrap()),
        threads: 2,
        ..config
    })
    .expect("server starts")
}

/// A request packet.
fn packet(opcode: u8, extras: &[u8], key: &[u8], value: &[u8], cas: u64) -> Vec<u8> {
    let body = extras.len() + key.len() + value.len();
    let mut p = vec![0x80, opcode];
    p.extend_from_slice(&(key.len() as u16).to_be_bytes());
    p.push(extras.len() as u8);
    p.extend_from_slice(&[0, 0, 0]);
    p.extend_from_slice(&(body as u32).to_be_bytes());
    // The opaque: the opcode repeated, to see that each reply echoes its own.
    p.extend_from_slice(&[opcode, 0xa5, opcode, 0x5a]);
    p.extend_from_slice(&cas.to_be_bytes());
    p.extend_from_slice(extras);
    p.extend_from_slice(key);
    p.extend_from_slice(value);
    p
}

fn store_extras(flags: u32, exptime: u32) -> Vec<u8> {
    [flags.to_be_bytes(), exptime.to_be_bytes()].concat()
}

fn arith_extras(delta: u64, initial: u64, exptime: u32) -> Vec<u8> {
    [
        &delta.to_be_bytes()[..],
        &initial.to_be_bytes(),
        &exptime.to_be_bytes(),
    ]
    .concat()
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Response {
    opcode: u8,
    status: u16,
    cas: u64,
    extras: Vec<u8>,
    key: Vec<u8>,
    value: Vec<u8>,
}

impl Response {
    fn flags(&self) -> u32 {
        u32::from_be_bytes(self.extras[..4].try_into().unwrap())
    }

    fn number(&self) -> u64 {
        u64::from_be_bytes(self.value[..8].try_into().unwrap())
    }
}

struct Conn(TcpStream);

impl Conn {
    fn new(server: &Server) -> Conn {
        let s = TcpStream::connect(server.memcached_addr().unwrap()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Conn(s)
    }

    fn send(&mut self, p: &[u8]) {
        self.0.write_all(p).unwrap();
    }

    fn recv(&mut self) -> Response {
        let mut h = [0u8; 24];
        self.0.read_exact(&mut h).unwrap();
        assert_eq!(h[0], 0x81, "response magic");
        assert_eq!(h[5], 0, "data type: raw bytes");
        assert_eq!(
            [h[12], h[14]],
            [h[1], h[1]],
            "the opaque echoes the request's"
        );
        let keylen = u16::from_be_bytes([h[2], h[3]]) as usize;
        let extlen = h[4] as usize;
        let bodylen = u32::from_be_bytes(h[8..12].try_into().unwrap()) as usize;
        let mut body = vec![0; bodylen];
        self.0.read_exact(&mut body).unwrap();
        Response {
            opcode: h[1],
            status: u16::from_be_bytes([h[6], h[7]]),
            cas: u64::from_be_bytes(h[16..24].try_into().unwrap()),
            extras: body[..extlen].to_vec(),
            key: body[extlen..extlen + keylen].to_vec(),
            value: body[extlen + keylen..].to_vec(),
        }
    }

    /// Sends one request and reads one response.
    fn call(&mut self, p: &[u8]) -> Response {
        self.send(p);
        self.recv()
    }

    /// The responses before the noop that follows `p` (quiet commands).
    fn quiet(&mut self, p: &[u8]) -> Vec<Response> {
        self.send(&[p, &packet(NOOP, &[], &[], &[], 0)].concat());
        let mut got = Vec::new();
        loop {
            let r = self.recv();
            if r.opcode == NOOP {
                return got;
            }
            got.push(r);
        }
    }

    fn set(&mut self, key: &[u8], value: &[u8], flags: u32) -> u64 {
        let r = self.call(&packet(SET, &store_extras(flags, 0), key, value, 0));
        assert_eq!(r.status, OK, "{r:?}");
        r.cas
    }

    /// The connection was closed by the server.
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 64];
        matches!(self.0.read(&mut b), Ok(0))
    }
}

#[test]
fn every_write_takes_a_cas_and_a_failed_one_says_why() {
    let server = start(ServerConfig::default());
    let mut c = Conn::new(&server);
    let cas = c.set(b"k", b"v1", 7);
    assert_ne!(cas, 0);
    let r = c.call(&packet(GET, &[], b"k", &[], 0));
    assert_eq!((r.status, r.cas, r.flags()), (OK, cas, 7));
    assert_eq!(
        (r.key.as_slice(), r.value.as_slice()),
        (&b""[..], &b"v1"[..])
    );
    // set, replace and append with a stale CAS: exists; with the right one:
    // stored, with a new CAS.
    for op in [SET, REPLACE] {
        let r = c.call(&packet(op, &store_extras(0, 0), b"k", b"x", cas + 1));
        assert_eq!(r.status, EXISTS, "{op}");
        assert_eq!(r.value, b"Data exists for key.");
    }
    let r = c.call(&packet(APPEND, &[], b"k", b"x", cas + 1));
    assert_eq!(r.status, EXISTS);
    let r = c.call(&packet(REPLACE, &store_extras(9, 0), b"k", b"v2", cas));
    assert_eq!(r.status, OK);
    assert!(r.cas > cas);
    let cas2 = r.cas;
    // A text connection sees the same CAS unique.
    let mut t = TcpStream::connect(server.memcached_addr().unwrap()).unwrap();
    t.write_all(b"gets k\r\n").unwrap();
    let want = format!("VALUE k 9 2 {cas2}\r\nv2\r\nEND\r\n");
    let mut got = vec![0; want.len()];
    t.read_exact(&mut got).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), want);
    // add of a present key: exists; with a CAS it is a compare-and-swap,
    // as in memcached. replace, a CAS and append of an absent key: not
    // found, not found, not stored.
    let r = c.call(&packet(ADD, &store_extras(0, 0), b"k", b"x", 0));
    assert_eq!(r.status, EXISTS);
    let r = c.call(&packet(ADD, &store_extras(9, 0), b"k", b"v2", cas2));
    assert_eq!(r.status, OK);
    let cas2 = r.cas;
    let r = c.call(&packet(ADD, &store_extras(0, 0), b"k", b"x", cas2 + 1));
    assert_eq!(r.status, EXISTS);
    let r = c.call(&packet(ADD, &store_extras(0, 0), b"nokey", b"x", 1));
    assert_eq!(r.status, NOT_FOUND);
    let r = c.call(&packet(REPLACE, &store_extras(0, 0), b"nokey", b"x", 0));
    assert_eq!(
        (r.status, r.value.as_slice()),
        (NOT_FOUND, &b"Not found"[..])
    );
    let r = c.call(&packet(SET, &store_extras(0, 0), b"nokey", b"x", 5));
    assert_eq!(r.status, NOT_FOUND);
    let r = c.call(&packet(APPEND, &[], b"nokey", b"x", 0));
    assert_eq!(
        (r.status, r.value.as_slice()),
        (NOT_STORED, &b"Not stored."[..])
    );
    // Failures carry no CAS, no extras, no key.
    assert_eq!((r.cas, r.extras.len(), r.key.len()), (0, 0, 0));
    // delete: a stale CAS refuses, the right one deletes, then not found.
    let r = c.call(&packet(DELETE, &[], b"k", &[], cas));
    assert_eq!(r.status, EXISTS);
    let r = c.call(&packet(DELETE, &[], b"k", &[], cas2));
    assert_eq!((r.status, r.cas), (OK, 0));
    let r = c.call(&packet(DELETE, &[], b"k", &[], 0));
    assert_eq!(r.status, NOT_FOUND);
    // A quiet set answers nothing when it stores, its failure when not.
    assert!(
        c.quiet(&packet(SETQ, &store_extras(0, 0), b"q", b"1", 0))
            .is_empty()
    );
    let failed = c.quiet(&packet(SETQ, &store_extras(0, 0), b"q", b"2", 1));
    assert_eq!(failed.len(), 1);
    assert_eq!((failed[0].opcode, failed[0].status), (SETQ, EXISTS));
    server.shutdown();
}

#[test]
fn quiet_gets_before_a_noop_are_a_multi_get() {
    let server = start(ServerConfig::default());
    let mut c = Conn::new(&server);
    for (i, k) in [&b"a"[..], b"c", b"e"].iter().enumerate() {
        c.set(k, &k.repeat(i + 1), i as u32);
    }
    let keys: [&[u8]; 5] = [b"a", b"b", b"c", b"d", b"e"];
    let many: Vec<u8> = keys
        .iter()
        .flat_map(|k| packet(GETKQ, &[], k, &[], 0))
        .collect();
    let got = c.quiet(&many);
    let seen: Vec<(Vec<u8>, Vec<u8>, u32)> = got
        .iter()
        .map(|r| {
            assert_eq!((r.opcode, r.status), (GETKQ, OK));
            (r.key.clone(), r.value.clone(), r.flags())
        })
        .collect();
    assert_eq!(
        seen,
        [
            (b"a".to_vec(), b"a".to_vec(), 0),
            (b"c".to_vec(), b"cc".to_vec(), 1),
            (b"e".to_vec(), b"eee".to_vec(), 2),
        ]
    );
    // getq has no key; getk's miss carries the key, get's the message.
    let got = c.quiet(&packet(GETQ, &[], b"c", &[], 0));
    assert_eq!((got[0].key.len(), got[0].value.as_slice()), (0, &b"cc"[..]));
    let r = c.call(&packet(GETK, &[], b"zz", &[], 0));
    assert_eq!(
        (r.status, r.key.as_slice(), r.value.len()),
        (NOT_FOUND, &b"zz"[..], 0)
    );
    let r = c.call(&packet(GET, &[], b"zz", &[], 0));
    assert_eq!(
        (r.status, r.value.as_slice()),
        (NOT_FOUND, &b"Not found"[..])
    );
    server.shutdown();
}

#[test]
fn arithmetic_creates_with_the_initial_value_unless_told_not_to() {
    let server = start(ServerConfig::default());
    let mut c = Conn::new(&server);
    let no_create = arith_extras(5, 100, u32::MAX);
    let r = c.call(&packet(INCREMENT, &no_create, b"n", &[], 0));
    assert_eq!(r.status, NOT_FOUND);
    let r = c.call(&packet(INCREMENT, &arith_extras(5, 100, 0), b"n", &[], 0));
    assert_eq!((r.status, r.number(), r.value.len()), (OK, 100, 8));
    assert_ne!(r.cas, 0);
    let cas = r.cas;
    let r = c.call(&packet(INCREMENT, &no_create, b"n", &[], 0));
    assert_eq!(r.number(), 105);
    // A stale CAS refuses; the current one counts.
    let r = c.call(&packet(DECREMENT, &no_create, b"n", &[], cas));
    assert_eq!(r.status, EXISTS);
    let r = c.call(&packet(GET, &[], b"n", &[], 0));
    let r = c.call(&packet(
        DECREMENT,
        &arith_extras(200, 0, 0),
        b"n",
        &[],
        r.cas,
    ));
    assert_eq!((r.status, r.number()), (OK, 0), "decrements stop at 0");
    // Increments wrap at 2^64, as memcached's do.
    c.set(b"big", u64::MAX.to_string().as_bytes(), 0);
    let r = c.call(&packet(INCREMENT, &arith_extras(2, 0, 0), b"big", &[], 0));
    assert_eq!(r.number(), 1);
    // A quiet increment answers nothing; the value moved.
    assert!(
        c.quiet(&packet(INCREMENTQ, &no_create, b"big", &[], 0))
            .is_empty()
    );
    let r = c.call(&packet(GET, &[], b"big", &[], 0));
    assert_eq!(r.value, b"6");
    c.set(b"text", b"abc", 0);
    let r = c.call(&packet(INCREMENT, &no_create, b"text", &[], 0));
    assert_eq!(r.status, NON_NUMERIC);
    assert_eq!(r.value, b"Non-numeric server-side value for incr or decr");
    // A miss creates even with a CAS, as in memcached.
    let r = c.call(&packet(
        INCREMENT,
        &arith_extras(1, 7, 0),
        b"fresh",
        &[],
        99,
    ));
    assert_eq!((r.status, r.number()), (OK, 7));
    server.shutdown();
}

#[test]
fn touch_and_the_gat_family_set_the_expiry_and_return_the_item() {
    let server = start(ServerConfig::default());
    let mut c = Conn::new(&server);
    let exp = 1000u32.to_be_bytes();
    let r = c.call(&packet(TOUCH, &exp, b"t", &[], 0));
    assert_eq!(r.status, NOT_FOUND);
    c.set(b"t", b"value", 3);
    // touch: flags and CAS, no value.
    let r = c.call(&packet(TOUCH, &exp, b"t", &[], 0));
    assert_eq!((r.status, r.flags(), r.value.len()), (OK, 3, 0));
    assert_ne!(r.cas, 0);
    let r = c.call(&packet(GAT, &exp, b"t", &[], 0));
    assert_eq!(
        (r.status, r.key.len(), r.value.as_slice()),
        (OK, 0, &b"value"[..])
    );
    let r = c.call(&packet(GATK, &exp, b"t", &[], 0));
    assert_eq!(
        (r.key.as_slice(), r.value.as_slice()),
        (&b"t"[..], &b"value"[..])
    );
    // gatq: silent on a miss.
    assert!(c.quiet(&packet(GATQ, &exp, b"none", &[], 0)).is_empty());
    // An expiry past 30 days is a unix time; this one has passed.
    let past = (30 * 86_400 + 1u32).to_be_bytes();
    let r = c.call(&packet(GAT, &past, b"t", &[], 0));
    assert_eq!(r.status, OK);
    let r = c.call(&packet(GET, &[], b"t", &[], 0));
    assert_eq!(r.status, NOT_FOUND);
    // A set's expiry the same way.
    let r = c.call(&packet(
        SET,
        &store_extras(0, 30 * 86_400 + 1),
        b"old",
        b"x",
        0,
    ));
    assert_eq!(r.status, OK);
    assert_eq!(c.call(&packet(GET, &[], b"old", &[], 0)).status, NOT_FOUND);
    server.shutdown();
}

#[test]
fn errors_keep_framing_unless_the_header_is_malformed() {
    let server = start(ServerConfig {
        max_value_bytes: ByteSize(1000),
        ..Default::default()
    });
    let mut c = Conn::new(&server);
    // An unknown opcode: answered, its body skipped.
    let r = c.call(&packet(0x50, &[1, 2], b"key", b"body", 0));
    assert_eq!((r.opcode, r.status), (0x50, UNKNOWN));
    // A value over max-value-bytes: too large, skipped unread, nothing stored.
    let r = c.call(&packet(SET, &store_extras(0, 0), b"big", &[b'x'; 5000], 0));
    assert_eq!(
        (r.status, r.value.as_slice()),
        (TOO_LARGE, &b"Too large."[..])
    );
    assert_eq!(c.call(&packet(GET, &[], b"big", &[], 0)).status, NOT_FOUND);
    // version and verbosity still answer.
    let r = c.call(&packet(VERSION, &[], &[], &[], 0));
    assert!(r.value.starts_with(b"1.6"), "{r:?}");
    let r = c.call(&packet(VERBOSITY, &1u32.to_be_bytes(), &[], &[], 0));
    assert_eq!(r.status, OK);
    // A get with extras is malformed: invalid arguments, then closed.
    let r = c.call(&packet(GET, &[0; 4], b"k", &[], 0));
    assert_eq!(r.status, INVALID);
    assert!(c.closed());
    // A connection that starts binary stays binary: a text line after a
    // binary request is read as a header (24 bytes) without the request
    // magic, and the connection closed without a reply.
    let mut c = Conn::new(&server);
    assert_eq!(c.call(&packet(NOOP, &[], &[], &[], 0)).status, OK);
    c.send(b"get a_key_long_enough_for_a_header\r\n");
    assert!(c.closed());
    server.shutdown();
}

#[test]
fn stat_flush_and_their_quiet_forms() {
    let server = start(ServerConfig::default());
    let mut c = Conn::new(&server);
    c.set(b"a", b"1", 0);
    c.send(&packet(STAT, &[], &[], &[], 0));
    let mut names = Vec::new();
    loop {
        let r = c.recv();
        assert_eq!((r.status, r.cas), (OK, 0));
        if r.key.is_empty() {
            assert!(r.value.is_empty());
            break;
        }
        names.push(String::from_utf8(r.key).unwrap());
    }
    for want in ["pid", "uptime", "cmd_set", "get_hits", "curr_items"] {
        assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
    }
    // reset: only the terminator; slabs: the text group's lines; a group
    // not kept: not found.
    let r = c.call(&packet(STAT, &[], b"reset", &[], 0));
    assert_eq!((r.status, r.key.len()), (OK, 0));
    c.send(&packet(STAT, &[], b"slabs", &[], 0));
    let mut slabs = Vec::new();
    loop {
        let r = c.recv();
        assert_eq!(r.status, OK);
        if r.key.is_empty() {
            break;
        }
        slabs.push((String::from_utf8(r.key).unwrap(), r.value));
    }
    assert!(
        slabs.contains(&("1:used_chunks".to_string(), b"1".to_vec())),
        "{slabs:?}"
    );
    assert!(
        slabs.contains(&("active_slabs".to_string(), b"1".to_vec())),
        "{slabs:?}"
    );
    let r = c.call(&packet(STAT, &[], b"detail", &[], 0));
    assert_eq!(r.status, NOT_FOUND);
    // A delayed flush leaves the item for now; a flush removes it.
    let r = c.call(&packet(FLUSH, &600u32.to_be_bytes(), &[], &[], 0));
    assert_eq!(r.status, OK);
    assert_eq!(c.call(&packet(GET, &[], b"a", &[], 0)).status, OK);
    let r = c.call(&packet(FLUSH, &[], &[], &[], 0));
    assert_eq!(r.status, OK);
    assert_eq!(c.call(&packet(GET, &[], b"a", &[], 0)).status, NOT_FOUND);
    server.shutdown();
}

#[test]
fn sasl_plain_authenticates_a_binary_connection() {
    let server = start(ServerConfig {
        requirepass: Some("s3cret".into()),
        ..Default::default()
    });
    // Before authentication: refused, and closed.
    let mut c = Conn::new(&server);
    let r = c.call(&packet(SET, &store_extras(0, 0), b"k", b"v", 0));
    assert_eq!(
        (r.status, r.value.as_slice()),
        (AUTH_ERROR, &b"Auth failure."[..])
    );
    assert!(c.closed());
    // Refused from the header alone: an unknown opcode, and a 100 MB set
    // whose body is never sent.
    let mut c = Conn::new(&server);
    let r = c.call(&packet(0x50, &[], &[], &[], 0));
    assert_eq!((r.opcode, r.status), (0x50, AUTH_ERROR));
    assert!(c.closed());
    let mut c = Conn::new(&server);
    let mut big = packet(SET, &store_extras(0, 0), b"k", &[], 0);
    big[8..12].copy_from_slice(&(100_000_009u32).to_be_bytes());
    let r = c.call(&big);
    assert_eq!(r.status, AUTH_ERROR);
    assert!(c.closed());
    let mut c = Conn::new(&server);
    // A SASL body over 1 KiB is refused unread; the connection stays.
    let r = c.call(&packet(SASL_AUTH, &[], b"PLAIN", &[b'x'; 2000], 0));
    assert_eq!(r.status, TOO_LARGE);
    let r = c.call(&packet(SASL_LIST, &[], &[], &[], 0));
    assert_eq!((r.status, r.value.as_slice()), (OK, &b"PLAIN"[..]));
    // A wrong password or an unknown mechanism: refused, still open.
    let r = c.call(&packet(SASL_AUTH, &[], b"PLAIN", b"\0default\0wrong", 0));
    assert_eq!(r.status, AUTH_ERROR);
    let r = c.call(&packet(
        SASL_AUTH,
        &[],
        b"CRAM-MD5",
        b"\0default\0s3cret",
        0,
    ));
    assert_eq!(r.status, AUTH_ERROR);
    let r = c.call(&packet(SASL_AUTH, &[], b"PLAIN", b"\0default\0s3cret", 0));
    assert_eq!((r.status, r.value.as_slice()), (OK, &b"Authenticated"[..]));
    c.set(b"k", b"v", 0);
    assert_eq!(c.call(&packet(GET, &[], b"k", &[], 0)).value, b"v");
    server.shutdown();
    // Without a password there is no SASL, as in memcached without -S.
    let server = start(ServerConfig::default());
    let mut c = Conn::new(&server);
    let r = c.call(&packet(SASL_LIST, &[], &[], &[], 0));
    assert_eq!(r.status, UNKNOWN);
    server.shutdown();
}

#[test]
fn the_memcache_crate_over_binary() {
    let server = start(ServerConfig::default());
    let url = format!(
        "memcache://{}?protocol=binary&timeout=10",
        server.memcached_addr().unwrap()
    );
    let c = memcache::Client::connect(url).expect("memcache client connects");
    assert!(!c.version().unwrap()[0].1.is_empty());
    c.set("a", "apple", 0).unwrap();
    c.set("n", 41u64, 100).unwrap();
    assert_eq!(c.get::<String>("a").unwrap().as_deref(), Some("apple"));
    assert_eq!(c.increment("n", 1).unwrap(), 42);
    assert_eq!(c.decrement("n", 50).unwrap(), 0);
    assert!(
        c.add("a", "again", 0).is_err(),
        "add of a present key fails"
    );
    assert_eq!(c.get::<String>("a").unwrap().as_deref(), Some("apple"));
    c.add("b", "banana", 0).unwrap();
    c.append("b", "!").unwrap();
    c.prepend("b", "<").unwrap();
    c.replace("a", "avocado", 0).unwrap();
    // A multi-get: getkq for each key, then a noop.
    let got: std::collections::HashMap<String, String> = c.gets(&["a", "b", "missing"]).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(
        (got["a"].as_str(), got["b"].as_str()),
        ("avocado", "<banana!")
    );
    assert!(c.touch("a", 1000).unwrap());
    assert!(!c.touch("zzz", 1000).unwrap());
    assert!(c.delete("b").unwrap());
    assert!(!c.delete("b").unwrap());
    c.flush().unwrap();
    assert_eq!(c.get::<String>("a").unwrap(), None);
    server.shutdown();
}
