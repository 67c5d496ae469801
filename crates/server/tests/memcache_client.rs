//! The `memcache` crate (ASCII protocol) against a server started here,
//! reads and writes on one keyspace, and the keyspace shared with RESP.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use combkv_server::{Listen, Server, ServerConfig};

fn start() -> Server {
    Server::start(ServerConfig {
        resp: Listen::At("127.0.0.1:0".parse().unwrap()),
        memcached: Listen::At("127.0.0.1:0".parse().unwrap()),
        threads: 2,
        ..Default::default()
    })
    .expect("server starts")
}

fn client(server: &Server) -> memcache::Client {
    let url = format!(
        "memcache://{}?protocol=ascii&timeout=10",
        server.memcached_addr().unwrap()
    );
    memcache::Client::connect(url).expect("memcache client connects")
}

#[test]
fn memcache_crate_reads_and_writes() {
    let server = start();
    let c = client(&server);
    assert!(!c.version().unwrap()[0].1.is_empty());
    c.set("a", "apple", 0).unwrap();
    c.set("n", 41u64, 100).unwrap();
    assert_eq!(c.get::<String>("a").unwrap().as_deref(), Some("apple"));
    assert_eq!(c.increment("n", 1).unwrap(), 42);
    assert_eq!(c.decrement("n", 50).unwrap(), 0);
    // The crate reports NOT_STORED as success: the value must be unchanged.
    c.add("a", "again", 0).unwrap();
    assert_eq!(c.get::<String>("a").unwrap().as_deref(), Some("apple"));
    c.add("b", "banana", 0).unwrap();
    c.append("b", "!").unwrap();
    c.prepend("b", "<").unwrap();
    c.replace("a", "avocado", 0).unwrap();
    let got: std::collections::HashMap<String, String> = c.gets(&["a", "b", "missing"]).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got["a"], "avocado");
    assert_eq!(got["b"], "<banana!");
    // CAS with the unique gets returned.
    let with_cas: std::collections::HashMap<String, (Vec<u8>, u32, Option<u64>)> =
        c.gets(&["a"]).unwrap();
    let cas = with_cas["a"].2.expect("gets returns a cas unique");
    assert!(c.cas("a", "apricot", 0, cas).unwrap());
    assert!(!c.cas("a", "again", 0, cas).unwrap(), "stale cas refused");
    assert_eq!(c.get::<String>("a").unwrap().as_deref(), Some("apricot"));
    assert!(c.touch("a", 1000).unwrap());
    assert!(!c.touch("zzz", 1000).unwrap());
    assert!(c.delete("b").unwrap());
    assert!(!c.delete("b").unwrap());
    assert_eq!(c.get::<String>("b").unwrap(), None);
    // Many writes and reads interleaved from two clients.
    let c2 = client(&server);
    for i in 0..300u32 {
        let key = format!("k{}", i % 37);
        if i % 3 == 0 {
            c.set(&key, i, 0).unwrap();
        } else {
            let mine: Option<u32> = c.get(&key).unwrap();
            let theirs: Option<u32> = c2.get(&key).unwrap();
            assert_eq!(mine, theirs, "{key}");
        }
    }
    // (The crate's `stats()` stops at the first line; `stats` is covered
    // by the raw tests.)
    c.flush().unwrap();
    assert_eq!(c.get::<String>("a").unwrap(), None);
    server.shutdown();
}

/// One RESP request as raw bytes; returns the reply read until `done`
/// accepts it.
fn resp(server: &Server, req: &[u8], done: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let mut s = TcpStream::connect(server.resp_addr().unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(req).unwrap();
    let mut got = Vec::new();
    while !done(&got) {
        let mut buf = [0; 1024];
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "RESP connection closed after {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
    got
}

#[test]
fn keys_cross_between_memcached_and_resp() {
    let server = start();
    let c = client(&server);
    c.set("from-mc", "hello", 0).unwrap();
    let got = resp(&server, b"*2\r\n$3\r\nGET\r\n$7\r\nfrom-mc\r\n", |b| {
        b.ends_with(b"\r\n") && b.len() >= 11
    });
    assert_eq!(got, b"$5\r\nhello\r\n");
    let got = resp(
        &server,
        b"*3\r\n$3\r\nSET\r\n$9\r\nfrom-resp\r\n$5\r\nworld\r\n",
        |b| b.ends_with(b"\r\n"),
    );
    assert_eq!(got, b"+OK\r\n");
    // A RESP write stores no client flags.
    let v: Option<(String, u32)> = c.get("from-resp").unwrap();
    assert_eq!(v, Some(("world".to_string(), 0)));
    // A memcached increment on a RESP-written number, and back.
    resp(
        &server,
        b"*3\r\n$3\r\nSET\r\n$1\r\nn\r\n$2\r\n41\r\n",
        |b| b.ends_with(b"\r\n"),
    );
    assert_eq!(c.increment("n", 1).unwrap(), 42);
    let got = resp(&server, b"*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n", |b| {
        b.ends_with(b"\r\n")
    });
    assert_eq!(got, b":43\r\n");
    server.shutdown();
}
