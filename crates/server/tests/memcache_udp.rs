//! memcached's UDP transport (`memcached-udp`): a test client that frames
//! requests with memcached's 8-byte header and reassembles replies by
//! sequence number, for values that fit one datagram and values that take
//! many. Off by default; refused with `requirepass`.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use combkv_server::{Listen, Server, ServerConfig};

const MAX_DATAGRAM: usize = 1400;

fn start() -> Server {
    Server::start(ServerConfig {
        resp: Listen::Off,
        memcached: Listen::At("127.0.0.1:0".parse().unwrap()),
        memcached_udp: Listen::At("127.0.0.1:0".parse().unwrap()),
        threads: 1,
        ..Default::default()
    })
    .expect("server starts")
}

/// Stores `value` under `key` over TCP (the text protocol).
fn tcp_set(server: &Server, key: &str, value: &[u8], flags: u32) {
    let mut s = TcpStream::connect(server.memcached_addr().unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(format!("set {key} {flags} 0 {}\r\n", value.len()).as_bytes())
        .unwrap();
    s.write_all(value).unwrap();
    s.write_all(b"\r\n").unwrap();
    let mut got = [0u8; 8];
    s.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"STORED\r\n");
}

struct Client {
    socket: UdpSocket,
    server: SocketAddr,
}

impl Client {
    fn new(server: &Server) -> Client {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Client {
            socket,
            server: server.memcached_udp_addr().expect("UDP is on"),
        }
    }

    /// One datagram: the frame header (`id`, sequence `seq` of `total`) and
    /// `payload`.
    fn send_raw(&self, id: u16, seq: u16, total: u16, payload: &[u8]) {
        let mut d = Vec::new();
        for n in [id, seq, total, 0] {
            d.extend_from_slice(&n.to_be_bytes());
        }
        d.extend_from_slice(payload);
        self.socket.send_to(&d, self.server).unwrap();
    }

    /// Sends `request` as request `id` and reassembles the reply: every
    /// datagram must carry `id`, the same count, and a sequence number
    /// seen once.
    fn request(&self, id: u16, request: &[u8]) -> (Vec<u8>, usize) {
        self.send_raw(id, 0, 1, request);
        let mut parts = BTreeMap::new();
        let mut total = None;
        let mut buf = vec![0u8; 65536];
        loop {
            let (n, from) = self.socket.recv_from(&mut buf).expect("a reply datagram");
            assert_eq!(from, self.server);
            assert!(n <= MAX_DATAGRAM, "datagram of {n} bytes");
            let d = &buf[..n];
            let at = |i: usize| u16::from_be_bytes([d[i], d[i + 1]]);
            assert_eq!(at(0), id, "request id echoed");
            assert_eq!(at(6), 0, "reserved");
            let t = *total.get_or_insert(at(4));
            assert_eq!(at(4), t, "every datagram gives the same count");
            assert!(at(2) < t);
            assert!(
                parts.insert(at(2), d[8..].to_vec()).is_none(),
                "sequence {} twice",
                at(2)
            );
            if parts.len() == t as usize {
                return (parts.into_values().flatten().collect(), t as usize);
            }
        }
    }

    /// Nothing arrives within a short wait.
    fn silent(&self) -> bool {
        self.socket
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut buf = [0u8; 2048];
        let quiet = self.socket.recv_from(&mut buf).is_err();
        self.socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        quiet
    }
}

#[test]
fn single_datagram_replies_for_get_and_gets() {
    let server = start();
    tcp_set(&server, "a", b"apple", 3);
    tcp_set(&server, "b", b"banana", 0);
    let c = Client::new(&server);
    let (reply, n) = c.request(7, b"get a\r\n");
    assert_eq!(
        (reply.as_slice(), n),
        (&b"VALUE a 3 5\r\napple\r\nEND\r\n"[..], 1)
    );
    // Several keys (one missing) and several lines in one datagram.
    let (reply, _) = c.request(8, b"get a nope b\r\nget b\r\n");
    assert_eq!(
        String::from_utf8(reply).unwrap(),
        "VALUE a 3 5\r\napple\r\nVALUE b 0 6\r\nbanana\r\nEND\r\nVALUE b 0 6\r\nbanana\r\nEND\r\n"
    );
    // gets: the CAS unique the TCP listener reports.
    let (reply, _) = c.request(9, b"gets a\r\n");
    let reply = String::from_utf8(reply).unwrap();
    let mut s = TcpStream::connect(server.memcached_addr().unwrap()).unwrap();
    s.write_all(b"gets a\r\n").unwrap();
    let mut tcp = vec![0u8; reply.len()];
    s.read_exact(&mut tcp).unwrap();
    assert_eq!(reply, String::from_utf8(tcp).unwrap());
    assert!(reply.starts_with("VALUE a 3 5 "), "{reply}");
    // Other commands are refused and change nothing.
    let (reply, _) = c.request(10, b"set a 0 0 1\r\nx\r\n");
    assert!(reply.starts_with(b"SERVER_ERROR UDP serves only get and gets\r\n"));
    let (reply, _) = c.request(11, b"get a\r\n");
    assert_eq!(reply, b"VALUE a 3 5\r\napple\r\nEND\r\n");
    server.shutdown();
}

#[test]
fn a_large_value_comes_back_in_many_datagrams() {
    let server = start();
    let value: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    tcp_set(&server, "big", &value, 0);
    tcp_set(&server, "small", b"s", 0);
    let c = Client::new(&server);
    let (reply, n) = c.request(0xbeef, b"get small big\r\n");
    let mut want = b"VALUE small 0 1\r\ns\r\nVALUE big 0 100000\r\n".to_vec();
    want.extend_from_slice(&value);
    want.extend_from_slice(b"\r\nEND\r\n");
    assert_eq!(reply.len(), want.len());
    assert!(reply == want, "reassembled reply differs");
    assert_eq!(n, want.len().div_ceil(MAX_DATAGRAM - 8));
    assert!(n > 70, "{n} datagrams");
    server.shutdown();
}

#[test]
fn a_reply_past_max_reply_bytes_becomes_an_error() {
    let server = Server::start(ServerConfig {
        resp: Listen::Off,
        memcached: Listen::At("127.0.0.1:0".parse().unwrap()),
        memcached_udp: Listen::At("127.0.0.1:0".parse().unwrap()),
        threads: 1,
        max_reply_bytes: combkv_server::ByteSize(64 << 10),
        ..Default::default()
    })
    .unwrap();
    tcp_set(&server, "v", &[b'x'; 10_000], 0);
    let c = Client::new(&server);
    // 20 x 10 kB: past 64 KiB at the seventh value, read no further.
    let line = format!("get{}\r\n", " v".repeat(20));
    let (reply, n) = c.request(1, line.as_bytes());
    assert_eq!(
        (reply.as_slice(), n),
        (&b"SERVER_ERROR object too large for cache\r\n"[..], 1)
    );
    // Within the bound it is served.
    let (reply, n) = c.request(2, b"get v v v\r\n");
    assert_eq!((reply.len(), n), (3 * (17 + 10_002) + 5, 22));
    // A refused storage command's data block is skipped, not read as
    // commands: the `get` inside it is not answered.
    let (reply, _) = c.request(3, b"set k 0 0 99999999\r\nget v\r\n");
    assert_eq!(reply, b"SERVER_ERROR object too large for cache\r\n");
    server.shutdown();
}

#[test]
fn malformed_datagrams_are_dropped() {
    let server = start();
    tcp_set(&server, "k", b"v", 0);
    let c = Client::new(&server);
    // Shorter than a frame header; part of a multi-datagram request.
    c.socket.send_to(b"get k", c.server).unwrap();
    assert!(c.silent());
    c.send_raw(1, 0, 2, b"get k\r\n");
    assert!(c.silent());
    c.send_raw(2, 1, 1, b"get k\r\n");
    assert!(c.silent());
    // An unfinished line: nothing to answer.
    c.send_raw(3, 0, 1, b"get k");
    assert!(c.silent());
    // The server still answers.
    let (reply, _) = c.request(4, b"get k\r\n");
    assert_eq!(reply, b"VALUE k 0 1\r\nv\r\nEND\r\n");
    server.shutdown();
}

#[test]
fn udp_is_off_by_default_and_refused_with_a_password() {
    let server = Server::start(ServerConfig {
        resp: Listen::Off,
        memcached: Listen::At("127.0.0.1:0".parse().unwrap()),
        threads: 1,
        ..Default::default()
    })
    .unwrap();
    assert_eq!(server.memcached_udp_addr(), None);
    server.shutdown();
    let err = Server::start(ServerConfig {
        resp: Listen::Off,
        memcached: Listen::At("127.0.0.1:0".parse().unwrap()),
        memcached_udp: Listen::At("127.0.0.1:0".parse().unwrap()),
        requirepass: Some("pw".into()),
        ..Default::default()
    })
    .unwrap_err();
    assert!(err.to_string().contains("requirepass"), "{err}");
}

/// One RESP command over TCP, its reply up to `until`.
fn resp(server: &Server, line: &str, until: &str) -> String {
    let mut s = TcpStream::connect(server.resp_addr().unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(format!("{line}\r\n").as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains(until) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(got).unwrap()
}

fn hot_cache_hits(server: &Server) -> u64 {
    let info = resp(server, "INFO stats", "hot_cache_misses:");
    info.lines()
        .find_map(|l| l.strip_prefix("hot_cache_hits:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// CONFIG SET hot-cache-entries reaches the UDP reader too: its gets are
/// answered from a cache once one is set, and from none after 0.
#[test]
fn the_udp_reader_takes_hot_cache_entries_live() {
    let server = Server::start(ServerConfig {
        resp: Listen::At("127.0.0.1:0".parse().unwrap()),
        memcached: Listen::At("127.0.0.1:0".parse().unwrap()),
        memcached_udp: Listen::At("127.0.0.1:0".parse().unwrap()),
        threads: 1,
        ..Default::default()
    })
    .expect("server starts");
    tcp_set(&server, "hot", b"v", 0);
    let c = Client::new(&server);
    let gets = |first: u16| {
        for id in first..first + 100 {
            let (reply, _) = c.request(id, b"get hot\r\n");
            assert_eq!(reply, b"VALUE hot 0 1\r\nv\r\nEND\r\n");
        }
    };
    gets(0);
    assert_eq!(hot_cache_hits(&server), 0, "no cache by default");
    resp(&server, "CONFIG SET hot-cache-entries 64", "+OK\r\n");
    gets(100);
    let hits = hot_cache_hits(&server);
    assert!(hits > 50, "{hits} hits with a cache");
    resp(&server, "CONFIG SET hot-cache-entries 0", "+OK\r\n");
    gets(200);
    assert_eq!(hot_cache_hits(&server), hits, "hits without a cache");
    server.shutdown();
}
